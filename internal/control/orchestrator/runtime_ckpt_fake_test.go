package orchestrator

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/cove-dev/cove/internal/sandbox/egress"
	"github.com/cove-dev/cove/internal/sandbox/network"
	"github.com/cove-dev/cove/internal/sandbox/runtime"
)

// ckRuntime is the fake runtime that also checkpoints (CRIU's part) and takes sandboxes of an
// earlier server over (runc's state dir's part). A checkpoint ends the sandbox's envd and
// init as CRIU does; a restore or an adoption starts a new envd for the same id. An export
// writes checkpoint/origin naming the sandbox, which a create from it reads back, so a test
// can tell which checkpoint a copy started from.
type ckRuntime struct {
	*fakeRuntime
	onDisk       map[string]bool   // checkpointed sandboxes, by id (guarded by fakeRuntime.mu)
	restoredFrom map[string]string // a sandbox created from a checkpoint: the origin it names
	// Errors the next calls return, set by a test (under fakeRuntime.mu).
	checkpointErr, restoreErr, exportErr, canErr error
}

// ckBytes is what every fake checkpoint takes on disk.
const ckBytes = 4096

func withCheckpoints(c *Config) {
	c.Runtime = &ckRuntime{fakeRuntime: c.Runtime.(*fakeRuntime), onDisk: map[string]bool{}, restoredFrom: map[string]string{}}
}

// ck returns the harness's checkpointing runtime (the harness was made withCheckpoints).
func (h *harness) ck() *ckRuntime { return h.o.cfg.Runtime.(*ckRuntime) }

func (c *ckRuntime) setErr(fn func(c *ckRuntime)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fn(c)
}

func (c *ckRuntime) Create(ctx context.Context, spec runtime.Spec) (*runtime.Sandbox, error) {
	var origin []byte
	if spec.Restore != "" {
		var err error
		if origin, err = os.ReadFile(filepath.Join(spec.Restore, "checkpoint", "origin")); err != nil {
			return nil, fmt.Errorf("restore from %s: %w", spec.Restore, err)
		}
	}
	rsb, err := c.fakeRuntime.Create(ctx, spec)
	if err == nil && origin != nil {
		c.mu.Lock()
		c.restoredFrom[spec.ID] = string(origin)
		c.mu.Unlock()
	}
	return rsb, err
}

func (c *ckRuntime) CanCheckpoint() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.canErr
}

func (c *ckRuntime) Checkpoint(ctx context.Context, id string) (runtime.CheckpointInfo, error) {
	sb, err := c.get(id)
	if err != nil {
		return runtime.CheckpointInfo{}, err
	}
	c.mu.Lock()
	err = c.checkpointErr
	c.mu.Unlock()
	if err != nil {
		return runtime.CheckpointInfo{}, err
	}
	sb.shutDown(ctx, runtime.Exit{Code: -1, Checkpointed: true})
	c.mu.Lock()
	c.onDisk[id], sb.state = true, runtime.StateCheckpointed
	c.mu.Unlock()
	return runtime.CheckpointInfo{Bytes: ckBytes}, nil
}

// revive gives sandbox id a new envd and init in state, as a restore or an adoption does.
func (c *ckRuntime) revive(ctx context.Context, id string, state runtime.State) *runtime.Sandbox {
	c.mu.Lock()
	old, down := c.sandboxes[id], c.envdDown
	c.mu.Unlock()
	sb, rsb := newFakeSandbox(id, down)
	sb.state = state
	c.mu.Lock()
	c.sandboxes[id] = sb
	delete(c.onDisk, id)
	c.mu.Unlock()
	if old != nil {
		old.shutDown(ctx, runtime.Exit{Code: -1, Signal: "killed"})
	}
	return rsb
}

func (c *ckRuntime) Restore(ctx context.Context, id string) (*runtime.Sandbox, error) {
	c.mu.Lock()
	onDisk, err := c.onDisk[id], c.restoreErr
	c.mu.Unlock()
	switch {
	case err != nil:
		return nil, err
	case !onDisk:
		return nil, fmt.Errorf("%w: %s has no checkpoint", runtime.ErrNotFound, id)
	}
	return c.revive(ctx, id, runtime.StateRunning), nil
}

func (c *ckRuntime) Export(ctx context.Context, id, dir string) (int64, error) {
	c.mu.Lock()
	onDisk, err := c.onDisk[id], c.exportErr
	c.mu.Unlock()
	switch {
	case err != nil:
		return 0, err
	case !onDisk:
		return 0, fmt.Errorf("export %s: not checkpointed", id)
	}
	if err := os.MkdirAll(filepath.Join(dir, "checkpoint"), 0o700); err != nil {
		return 0, err
	}
	return ckBytes, os.WriteFile(filepath.Join(dir, "checkpoint", "origin"), []byte(id), 0o600)
}

func (c *ckRuntime) CheckpointBytes(id string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.onDisk[id] {
		return ckBytes
	}
	return 0
}

// Adopt hands a sandbox an earlier server left over: one whose init ended is gone, one on
// disk is checkpointed, the others get a new envd in the state they were in.
func (c *ckRuntime) Adopt(ctx context.Context, id string) (*runtime.Sandbox, runtime.State, error) {
	sb, err := c.get(id)
	if err != nil {
		return nil, runtime.StateUnknown, err
	}
	select {
	case <-sb.exited:
		c.mu.Lock()
		onDisk := c.onDisk[id]
		if !onDisk {
			delete(c.sandboxes, id)
		}
		c.mu.Unlock()
		if onDisk {
			return nil, runtime.StateCheckpointed, nil
		}
		return nil, runtime.StateUnknown, fmt.Errorf("%w: %s's init is gone", runtime.ErrNotFound, id)
	default:
	}
	state, _ := c.State(ctx, id)
	return c.revive(ctx, id, state), state, nil
}

var (
	_ runtime.Checkpointer = (*ckRuntime)(nil)
	_ runtime.Adopter      = (*ckRuntime)(nil)
	_ Runtime              = (*ckRuntime)(nil)
)

// fakeNetwork stands in for the network manager (namespaces, nftables): it records what the
// orchestrator asks of it and keeps each sandbox's policy and inbound settings as it does.
type fakeNetwork struct {
	mu        sync.Mutex
	dir       string
	policies  map[string]egress.Policy
	inbound   map[string]network.Inbound
	detached  []string
	dropCalls int
	// Errors the next calls return, set by a test.
	attachErr, updateErr, reclaimErr error
}

func withNetwork(n *fakeNetwork) option {
	return func(c *Config) { c.Network = n }
}

func newFakeNetwork(dir string) *fakeNetwork {
	return &fakeNetwork{dir: dir, policies: map[string]egress.Policy{}, inbound: map[string]network.Inbound{}}
}

func (n *fakeNetwork) attachment(id string) *network.Attachment {
	return &network.Attachment{Netns: "/run/netns/cove-" + id, ResolvConf: filepath.Join(n.dir, id+".resolv.conf"),
		Addr: netip.MustParseAddr("198.18.0.2"), Gateway: netip.MustParseAddr("198.18.0.1")}
}

func (n *fakeNetwork) Attach(ctx context.Context, id string, p egress.Policy) (*network.Attachment, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.attachErr != nil {
		return nil, n.attachErr
	}
	n.policies[id] = p
	return n.attachment(id), nil
}

func (n *fakeNetwork) Update(ctx context.Context, id string, p egress.Policy) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.updateErr != nil {
		return n.updateErr
	}
	if _, ok := n.policies[id]; !ok {
		return fmt.Errorf("%w: %s", network.ErrNotAttached, id)
	}
	n.policies[id] = p
	return nil
}

func (n *fakeNetwork) Policy(id string) (egress.Policy, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	p, ok := n.policies[id]
	return p, ok
}

func (n *fakeNetwork) Detach(ctx context.Context, id string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.policies, id)
	delete(n.inbound, id)
	n.detached = append(n.detached, id)
	return nil
}

func (n *fakeNetwork) TrustBundle(id string, templateBundle []byte) (string, error) {
	path := filepath.Join(n.dir, id+".ca.crt")
	return path, os.WriteFile(path, append(templateBundle, "# cove egress CA\n"...), 0o600)
}

func (n *fakeNetwork) SetInbound(id string, in network.Inbound) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.inbound[id] = in
	return nil
}

func (n *fakeNetwork) Inbound(id string) (network.Inbound, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	in, ok := n.inbound[id]
	return in, ok
}

func (n *fakeNetwork) Reclaim(ctx context.Context, id string) (*network.Attachment, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.reclaimErr != nil {
		return nil, n.reclaimErr
	}
	if _, ok := n.policies[id]; !ok {
		return nil, fmt.Errorf("%w: %s", network.ErrNotAttached, id)
	}
	return n.attachment(id), nil
}

func (n *fakeNetwork) DropUnclaimed(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.dropCalls++
	return nil
}

func (n *fakeNetwork) wasDetached(id string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Contains(n.detached, id)
}

var _ Network = (*fakeNetwork)(nil)
