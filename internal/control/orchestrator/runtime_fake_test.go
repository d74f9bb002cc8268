package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"

	"connectrpc.com/connect"

	"github.com/cove-dev/cove/internal/guest/envd"
	"github.com/cove-dev/cove/internal/guest/envd/process"
	"github.com/cove-dev/cove/internal/sandbox/runtime"
	pb "github.com/cove-dev/cove/sdk/gen/process"
	"github.com/cove-dev/cove/sdk/gen/process/processconnect"
)

// fakeRuntime stands in for runc and the kernel: the one boundary these tests fake. Each
// sandbox's envd is Cove's real envd handler, served in-process on loopback; Dial reaches it
// there, and its log lines and collection records come out of the sandbox's stderr and
// stdout pipes as they do from a real sandbox. What the kernel would do (an init exit, an OOM
// kill, a failing freezer) the test asks for through the fake's methods.
type fakeRuntime struct {
	mu        sync.Mutex
	sandboxes map[string]*fakeSandbox
	leftovers []string                // ids List reports that no Create made (a crash's leftovers)
	destroyed []string                // every id Destroy was called for, in order
	made      []string                // every id Create made
	specs     map[string]runtime.Spec // what each Create was asked for, by id

	// Errors the next calls return, set by a test.
	createErr, freezeErr, thawErr, listErr error
	// envdDown makes new sandboxes' envd never answer /health (a broken envd).
	envdDown bool
	// creating, when set, holds Create until it is closed, after the sandbox exists.
	creating chan struct{}
	// created receives each sandbox id as Create makes it.
	created chan string
}

type fakeSandbox struct {
	id    string
	state runtime.State
	envd  *envd.Server
	http  *httptest.Server
	ports map[int]string // other ports inside the sandbox: address to dial on loopback

	stdoutW, stderrW *io.PipeWriter
	exit             runtime.Exit  // the init's exit, set before exited is closed
	exited           chan struct{} // closed at the exit: every Wait sees it
	oom              chan uint64
	exitOnce         sync.Once
	downOnce         sync.Once
}

func newFakeRuntime() *fakeRuntime {
	return &fakeRuntime{sandboxes: map[string]*fakeSandbox{}, specs: map[string]runtime.Spec{}, created: make(chan string, 64)}
}

func (f *fakeRuntime) get(id string) (*fakeSandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb := f.sandboxes[id]
	if sb == nil {
		return nil, fmt.Errorf("%w: %s", runtime.ErrNotFound, id)
	}
	return sb, nil
}

func (f *fakeRuntime) Create(ctx context.Context, spec runtime.Spec) (*runtime.Sandbox, error) {
	if err := runtime.ValidID(spec.ID); err != nil {
		return nil, err
	}
	f.mu.Lock()
	createErr, down, gate := f.createErr, f.envdDown, f.creating
	f.mu.Unlock()
	if createErr != nil {
		return nil, createErr
	}
	sb, rsb := newFakeSandbox(spec.ID, down)
	f.mu.Lock()
	f.sandboxes[spec.ID] = sb
	f.made = append(f.made, spec.ID)
	f.specs[spec.ID] = spec
	f.mu.Unlock()
	f.created <- spec.ID
	if gate != nil {
		<-gate
	}
	return rsb, nil
}

// newFakeSandbox starts a sandbox's envd (broken when down) on loopback, with its pipes.
func newFakeSandbox(id string, down bool) (*fakeSandbox, *runtime.Sandbox) {
	outR, outW := io.Pipe()
	errR, errW := io.Pipe()
	sb := &fakeSandbox{id: id, state: runtime.StateRunning, ports: map[int]string{}, stdoutW: outW, stderrW: errW,
		exited: make(chan struct{}), oom: make(chan uint64, 8)}
	sb.envd = envd.New(envd.Config{
		Logger: slog.New(slog.NewJSONHandler(errW, &slog.HandlerOptions{Level: slog.LevelInfo})),
		Sink:   process.NewSink(outW, process.Budget{}),
	})
	var h http.Handler = sb.envd.Handler()
	if down {
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.Error(w, "envd is broken", http.StatusBadGateway) })
	}
	sb.http = httptest.NewServer(h)
	return sb, &runtime.Sandbox{ID: id, Pid: 1, Stdout: outR, Stderr: errR}
}

func (f *fakeRuntime) Start(ctx context.Context, id string) error { _, err := f.get(id); return err }

func (f *fakeRuntime) Freeze(ctx context.Context, id string) error {
	return f.setState(id, runtime.StatePaused, func() error { return f.freezeErr })
}

func (f *fakeRuntime) Thaw(ctx context.Context, id string) error {
	return f.setState(id, runtime.StateRunning, func() error { return f.thawErr })
}

// setState moves the sandbox to state, unless failure (read under the lock) says no.
func (f *fakeRuntime) setState(id string, state runtime.State, failure func() error) error {
	sb, err := f.get(id)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := failure(); err != nil {
		return err
	}
	sb.state = state
	return nil
}

func (f *fakeRuntime) Wait(ctx context.Context, id string) (runtime.Exit, error) {
	sb, err := f.get(id)
	if err != nil {
		return runtime.Exit{}, err
	}
	select {
	case <-sb.exited:
		return sb.exit, nil
	case <-ctx.Done():
		return runtime.Exit{}, ctx.Err()
	}
}

func (f *fakeRuntime) State(ctx context.Context, id string) (runtime.State, error) {
	sb, err := f.get(id)
	if err != nil {
		return runtime.StateUnknown, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return sb.state, nil
}

// fakeStats is what every fake sandbox's cgroups report.
var fakeStats = runtime.Stats{MemoryUsage: 64 << 20, MemoryMaxUsage: 80 << 20, MemoryLimit: 512 << 20, OOMKills: 0, PIDs: 3, PIDsLimit: 1024}

func (f *fakeRuntime) Stats(ctx context.Context, id string) (runtime.Stats, error) {
	if _, err := f.get(id); err != nil {
		return runtime.Stats{}, err
	}
	return fakeStats, nil
}

func (f *fakeRuntime) Dial(ctx context.Context, id, network, address string) (net.Conn, error) {
	sb, err := f.get(id)
	if err != nil {
		return nil, err
	}
	_, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	target := sb.http.Listener.Addr().String()
	if port != strconv.Itoa(EnvdPort) {
		n, _ := strconv.Atoi(port)
		f.mu.Lock()
		target = sb.ports[n]
		f.mu.Unlock()
		if target == "" {
			return nil, fmt.Errorf("dial %s in sandbox %s: connection refused", address, id)
		}
	}
	var d net.Dialer
	return d.DialContext(ctx, network, target)
}

// Destroy closes the sandbox's pipes, kills its processes (through envd's own API, as the
// kernel kills them with the sandbox) and ends its init.
func (f *fakeRuntime) Destroy(ctx context.Context, id string) error {
	f.mu.Lock()
	f.destroyed = append(f.destroyed, id)
	sb := f.sandboxes[id]
	delete(f.sandboxes, id)
	f.leftovers = slices.DeleteFunc(f.leftovers, func(l string) bool { return l == id })
	f.mu.Unlock()
	if sb == nil {
		return nil
	}
	sb.shutDown(ctx, runtime.Exit{Code: -1, Signal: "killed"})
	return nil
}

// shutDown ends the sandbox's envd and init once: at a destroy, a checkpoint, or when another
// server takes it over.
func (sb *fakeSandbox) shutDown(ctx context.Context, ex runtime.Exit) {
	sb.downOnce.Do(func() {
		// The pipes go first: envd dies with the sandbox and writes no end record of its own.
		_ = sb.stdoutW.Close()
		_ = sb.stderrW.Close()
		sb.killProcesses(ctx)
		sb.http.Close()
		sb.envd.Close()
	})
	sb.endInit(ex)
}

func (sb *fakeSandbox) killProcesses(ctx context.Context) {
	c := processconnect.NewProcessClient(http.DefaultClient, sb.http.URL)
	list, err := c.List(ctx, connect.NewRequest(&pb.ListRequest{}))
	if err != nil {
		return
	}
	for _, p := range list.Msg.GetProcesses() {
		_, _ = c.SendSignal(ctx, connect.NewRequest(&pb.SendSignalRequest{
			Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: p.GetPid()}}, Signal: pb.Signal_SIGNAL_SIGKILL}))
	}
}

// endInit makes the sandbox's init exit, once.
func (sb *fakeSandbox) endInit(ex runtime.Exit) {
	sb.exitOnce.Do(func() {
		sb.exit = ex
		close(sb.exited)
		close(sb.oom)
	})
}

// exitInit is the kernel ending the sandbox's init (envd crashed, or was OOM-killed).
func (f *fakeRuntime) exitInit(id string, ex runtime.Exit) error {
	sb, err := f.get(id)
	if err != nil {
		return err
	}
	sb.endInit(ex)
	return nil
}

// oomKill is the kernel's OOM killer acting inside the sandbox for the n-th time.
func (f *fakeRuntime) oomKill(id string, n uint64) error {
	sb, err := f.get(id)
	if err != nil {
		return err
	}
	sb.oom <- n
	return nil
}

func (f *fakeRuntime) List(ctx context.Context) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.listErr != nil {
		return nil, f.listErr
	}
	ids := slices.Clone(f.leftovers)
	for id := range f.sandboxes {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids, nil
}

func (f *fakeRuntime) OOMEvents(ctx context.Context, id string) (<-chan uint64, error) {
	sb, err := f.get(id)
	if err != nil {
		return nil, err
	}
	out := make(chan uint64)
	go func() {
		defer close(out)
		for {
			select {
			case n, ok := <-sb.oom:
				if !ok {
					return
				}
				select {
				case out <- n:
				case <-ctx.Done():
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

// fakeProcesses is what every fake sandbox's process table holds at a kill.
var fakeProcesses = []runtime.Process{
	{PID: 1, PPID: 0, State: "S", Command: "/.cove/cove envd --addr 0.0.0.0:49983", RSSBytes: 20 << 20},
	{PID: 7, PPID: 1, State: "R", Command: "python3 train.py --token s3cr3t-token-value", RSSBytes: 300 << 20},
}

func (f *fakeRuntime) Processes(ctx context.Context, id string) ([]runtime.Process, error) {
	if _, err := f.get(id); err != nil {
		return nil, err
	}
	return fakeProcesses, nil
}

func (f *fakeRuntime) wasDestroyed(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Contains(f.destroyed, id)
}

func (f *fakeRuntime) wasMade(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Contains(f.made, id)
}

func (f *fakeRuntime) set(fn func(f *fakeRuntime)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

var errFake = errors.New("fake runtime failure")

// Interface check: the fake is what the orchestrator asks of a runtime.
var _ Runtime = (*fakeRuntime)(nil)
