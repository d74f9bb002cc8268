package orchestrator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cove-dev/cove/internal/builder/template"
	"github.com/cove-dev/cove/internal/sandbox/runtime"

	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/sdk/reason"
)

// A cluster's node loss, both sides of it (issue 24). The node that notices another's lease
// lapsed declares that node's running sandboxes dead (NodeLost); the lost node, if it comes
// back, learns it at its next renewal and kills what it still runs (Lost). Both go through the
// one kill path with reason node_lost, so the record, the event, the webhook, the counter and
// `cove explain` say the same wherever the sandbox ran.

// engineFor is the engine a template's sandboxes run on: the one it requires, else the
// server's default, else runc.
func (o *Orchestrator) engineFor(t *template.Template) string {
	return cmp.Or(t.Runtime, o.cfg.Engine, string(runtime.EngineRunc))
}

// Holds says whether this node runs (or is creating) sandbox id: a cluster serves its
// requests here rather than forwarding them.
func (o *Orchestrator) Holds(id string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	_, live := o.live[id]
	_, creating := o.creating[id]
	return live || creating
}

// HoldsAfterMove is Holds once a move of id under way (Migrate) is over, or ctx ends: a
// request that arrives while its sandbox moves waits the short pause and follows it.
func (o *Orchestrator) HoldsAfterMove(ctx context.Context, id string) bool {
	o.mu.Lock()
	moved := o.moving[id]
	o.mu.Unlock()
	if moved != nil {
		select {
		case <-moved:
		case <-ctx.Done():
		}
	}
	return o.Holds(id)
}

// Placement is the part of the cluster's ledger (store.Nodes) a node's creates use.
type Placement interface {
	// Reserve records r on its node and team when both have room, all or none.
	Reserve(ctx context.Context, r store.Reservation, limits store.TeamLimits) error
	// StartDone ends the start under way of the sandbox's reservation.
	StartDone(ctx context.Context, sandboxID string) error
	// Release gives back what the sandbox reserved.
	Release(ctx context.Context, sandboxID string) error
}

// place reserves sb's room on this node in the cluster's ledger; settle, called once the
// create is over, ends its start (the sandbox went live) or gives the room back (it failed).
func (o *Orchestrator) place(ctx context.Context, sb *store.Sandbox) (settle func(), err error) {
	if o.cfg.Placement == nil {
		return func() {}, nil
	}
	q := o.cfg.Quotas.For(sb.TeamID)
	r := store.Reservation{SandboxID: sb.ID, Node: o.cfg.Node, TeamID: sb.TeamID, VCPUs: sb.CPUCount, MemoryMB: int64(sb.MemoryMB)}
	if err := o.cfg.Placement.Reserve(ctx, r, store.TeamLimits{Sandboxes: q.Sandboxes, VCPUs: q.VCPUs, MemoryMB: int64(q.MemoryMB)}); err != nil {
		telemetry.SandboxCreateFailures.WithLabelValues("placement").Inc()
		if full, ok := ctx.Value(nodeFullKey{}).(*atomic.Bool); ok && errors.Is(err, store.ErrNodeFull) {
			full.Store(true)
		}
		return nil, fmt.Errorf("place sandbox on node %s: %w", o.cfg.Node, err)
	}
	return func() {
		ctx := context.WithoutCancel(ctx)
		o.mu.Lock()
		_, live := o.live[sb.ID]
		o.mu.Unlock()
		var err error
		if live {
			err = o.cfg.Placement.StartDone(ctx, sb.ID)
		} else {
			err = o.cfg.Placement.Release(ctx, sb.ID)
		}
		if err != nil {
			o.logger(ctx).Warn("placement not settled", telemetry.KeySandboxID, sb.ID, telemetry.KeyError, err.Error())
		}
	}, nil
}

type nodeFullKey struct{}

// WatchNodeFull returns a context whose create reports, through full, that this node cannot
// take it: it had no room (store.ErrNodeFull), or the snapshot it starts from is another
// node's. The cluster then places the create on another node, rather than answer 429 or 404
// while another can.
func WatchNodeFull(ctx context.Context) (_ context.Context, full func() bool) {
	var b atomic.Bool
	return context.WithValue(ctx, nodeFullKey{}, &b), b.Load
}

// unplace gives back a killed sandbox's room in the cluster's ledger.
func (o *Orchestrator) unplace(ctx context.Context, id string) {
	if o.cfg.Placement == nil {
		return
	}
	if err := o.cfg.Placement.Release(context.WithoutCancel(ctx), id); err != nil {
		o.logger(ctx).Warn("placement not released", telemetry.KeySandboxID, id, telemetry.KeyError, err.Error())
	}
}

// remaining is what is left of sb's TTL, as a resume's timeout (0, the default, when none is).
func remaining(sb *store.Sandbox) time.Duration {
	return max(0, time.Until(sb.EndAt).Round(time.Second))
}

// nodeLostDetail is what a node_lost kill says: the node and its last heartbeat.
func nodeLostDetail(node string, heartbeat time.Time) string {
	return fmt.Sprintf("node %s lost: last heartbeat %s", node, heartbeat.UTC().Format(time.RFC3339Nano))
}

// NodeLost ends every running sandbox the store records on node (another node, whose lease
// lapsed) with reason node_lost, and returns how many it ended. Paused sandboxes stay paused:
// they hold no process on node. The sandboxes are not in this node's memory: each is killed
// from its record, which only marks it dead here (nothing of it runs on this node).
func (o *Orchestrator) NodeLost(ctx context.Context, node string, heartbeat time.Time) (int, error) {
	if node == "" || node == o.cfg.Node {
		return 0, fmt.Errorf("node lost: %q is not another node", node)
	}
	ctx = telemetry.WithRequestID(telemetry.WithLogger(ctx, o.cfg.Logger), SystemRequestID)
	recs, err := o.cfg.Store.LiveSandboxes(ctx)
	if err != nil {
		return 0, fmt.Errorf("node lost: %w", err)
	}
	n := 0
	for _, sb := range recs {
		if sb.Node != node || sb.State != store.StateRunning {
			continue
		}
		e := &entry{sb: sb, closers: map[*closer]struct{}{}, remote: true}
		if err := o.kill(ctx, e, reason.KillNodeLost, "", nodeLostDetail(node, heartbeat)); err != nil {
			o.logger(ctx).Error("node lost: kill sandbox", telemetry.KeySandboxID, sb.ID, telemetry.KeyNodeOther, node, telemetry.KeyError, err.Error())
			continue
		}
		o.closeOpenCommands(ctx, sb.ID, reason.KillNodeLost)
		n++
	}
	return n, nil
}

// Lost kills every sandbox this node still runs with reason node_lost: the cluster declared
// this node lost (its lease lapsed while it was cut off or stalled), so the others already
// count its sandboxes dead and a client may not find them alive here.
func (o *Orchestrator) Lost(ctx context.Context, heartbeat time.Time) {
	ctx = telemetry.WithRequestID(telemetry.WithLogger(ctx, o.cfg.Logger), SystemRequestID)
	for _, e := range o.entries() {
		if e.sb.State != store.StateRunning {
			continue
		}
		_ = o.kill(ctx, e, reason.KillNodeLost, "", nodeLostDetail(o.cfg.Node, heartbeat))
	}
}

// Mover carries a snapshot-paused sandbox's checkpoint between a cluster's nodes through
// its object store.
type Mover interface {
	// Upload stores the checkpoint exported to dir (runtime.Checkpointer.Export) as the
	// sandbox's (or, by a snapshot's id, the snapshot's files), replacing an older one.
	Upload(ctx context.Context, id, dir string) error
	// Download unpacks the sandbox's checkpoint into a new directory under parent and
	// returns it; an error wrapping ErrNotFound when there is none.
	Download(ctx context.Context, id, parent string) (string, error)
	// Forget deletes the sandbox's checkpoint: it runs again, or is gone.
	Forget(ctx context.Context, id string)
	// NodeAlive says whether a node holds its lease: a live node's paused sandboxes resume
	// there, never taken over.
	NodeAlive(ctx context.Context, node string) bool
}

// download unpacks id's files from the object store (a sandbox's checkpoint, a snapshot's
// files) into a scratch directory and returns it; done removes it once the copy has started.
func (o *Orchestrator) download(ctx context.Context, id string) (dir string, done func(), err error) {
	scratch, err := os.MkdirTemp(o.cfg.LogDir, ".download-"+id+"-")
	if err != nil {
		return "", nil, err
	}
	if dir, err = o.cfg.Mover.Download(ctx, id, scratch); err != nil {
		_ = os.RemoveAll(scratch)
		return "", nil, err
	}
	return dir, func() { _ = os.RemoveAll(scratch) }, nil
}

// shareCheckpoint uploads a sandbox just paused to disk, so that another node can resume it
// if this one is lost. A failed upload leaves the pause done: the sandbox resumes here only.
// Caller holds e.mu.
func (o *Orchestrator) shareCheckpoint(ctx context.Context, e *entry, ck runtime.Checkpointer) error {
	if o.cfg.Mover == nil {
		return nil
	}
	begun := time.Now()
	scratch, err := os.MkdirTemp(o.cfg.LogDir, ".share-"+e.sb.ID+"-")
	if err == nil {
		defer os.RemoveAll(scratch)
		dir := filepath.Join(scratch, "checkpoint") // Export makes it
		if _, err = ck.Export(ctx, e.sb.ID, dir); err == nil {
			err = o.cfg.Mover.Upload(ctx, e.sb.ID, dir)
		}
	}
	if err != nil {
		o.logger(ctx).Warn("paused sandbox not shared with the other nodes: it resumes on this node only", telemetry.KeyError, err.Error())
		return err
	}
	o.logger(ctx).Info("paused sandbox shared with the other nodes", telemetry.KeyDurationMS, time.Since(begun).Milliseconds())
	return nil
}

// takeOver resumes on this node a sandbox paused to disk on another node that is lost: its
// checkpoint comes from the object store, and it runs here under its own id, token and
// record, which names this node from then on. Its reservation on this node is the claim:
// two nodes taking it over at once cannot both reserve it.
func (o *Orchestrator) takeOver(ctx context.Context, sb *store.Sandbox, timeout time.Duration) (*store.Sandbox, error) {
	handed := sb.Node == o.cfg.Node // a draining node handed it here (Migrate)
	if o.cfg.Mover == nil || sb.State != store.StatePaused || sb.PauseKind != reason.PauseSnapshot ||
		sb.Node == "" || (!handed && o.cfg.Mover.NodeAlive(ctx, sb.Node)) {
		return nil, fmt.Errorf("%w: %s (recorded %s on node %q, which holds it)", ErrNotFound, sb.ID, sb.State, sb.Node)
	}
	// One take-over of a sandbox at a time on this node: a second finds it live.
	mu, _ := o.takeovers.LoadOrStore(sb.ID, &sync.Mutex{})
	mu.(*sync.Mutex).Lock()
	defer mu.(*sync.Mutex).Unlock()
	if o.Holds(sb.ID) {
		return o.Get(ctx, sb.TeamID, sb.ID)
	}
	if fresh, err := o.cfg.Store.GetSandbox(ctx, sb.ID); err != nil || fresh.State != store.StatePaused {
		return nil, fmt.Errorf("%w: %s is no longer paused elsewhere", ErrConflict, sb.ID)
	}
	timeout, err := o.clampTimeout(timeout)
	if err != nil {
		return nil, err
	}
	// Its volumes, at the paths its processes use: their leases moved with it (same id).
	mounts, err := o.volumeMountsByID(sb.TeamID, sb.ID)
	if err != nil {
		return nil, fmt.Errorf("resume %s: %w", sb.ID, err)
	}
	dir, done, err := o.download(ctx, sb.ID)
	if err != nil {
		return nil, fmt.Errorf("resume %s, paused on the lost node %s: %w", sb.ID, sb.Node, err)
	}
	defer done()
	out, err := o.createFrom(ctx, origin{team: sb.TeamID, template: sb.TemplateID, token: sb.EnvdAccessToken, metadata: sb.Metadata, runtime: sb.Runtime,
		secure: sb.Secure, autoPause: sb.AutoPause, autoResume: sb.AutoResume, allowInternet: sb.AllowInternet,
		autoPauseKind: sb.AutoPauseKind, moved: sb, volumes: mounts}, dir, timeout)
	if err != nil {
		return nil, fmt.Errorf("resume %s, paused on the lost node %s: %w", sb.ID, sb.Node, err)
	}
	o.cfg.Mover.Forget(ctx, sb.ID)
	return out, nil
}

// pausedElsewhere is the record of the team's sandbox id when another node paused it; false
// otherwise (takeOver decides whether this node may resume it).
func (o *Orchestrator) pausedElsewhere(ctx context.Context, teamID, id string) (*store.Sandbox, bool) {
	if o.cfg.Mover == nil {
		return nil, false
	}
	sb, err := o.cfg.Store.GetSandbox(ctx, id)
	if err != nil || (teamID != "" && sb.TeamID != teamID) || sb.State != store.StatePaused || o.Holds(id) {
		return nil, false
	}
	return sb, true
}

// Adopt takes over a sandbox another node handed to this one (Migrate): it runs here from
// its checkpoint in the object store, with its id, token, processes and memory.
func (o *Orchestrator) Adopt(ctx context.Context, id string) (*store.Sandbox, error) {
	ctx = telemetry.WithLogger(ctx, o.cfg.Logger)
	sb, err := o.cfg.Store.GetSandbox(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if sb.Node != o.cfg.Node {
		return nil, fmt.Errorf("%w: %s was handed to node %q, not this one", ErrConflict, id, sb.Node)
	}
	return o.takeOver(ctx, sb, remaining(sb))
}

// Migrate moves a running sandbox to node to (a drain): it is checkpointed and shared
// through the object store, its record handed to to, and adopt asks to to take it over.
// When adopt fails, the sandbox is taken back and resumed here: it is never lost to a move.
// Clients see a pause for the move's length; requests in it wait, then reach the new node.
func (o *Orchestrator) Migrate(ctx context.Context, id, to string, adopt func(context.Context) error) error {
	if o.cfg.Mover == nil || o.cfg.Placement == nil {
		return fmt.Errorf("%w: moving a sandbox needs a cluster with an object store (--node and --objects)", ErrInvalid)
	}
	begun := time.Now()
	// A move, once begun, finishes or is undone whatever becomes of the caller: a sandbox
	// is never left half-moved by a cancel (a server stopping, say).
	ctx = context.WithoutCancel(telemetry.WithRequestID(telemetry.WithLogger(ctx, o.cfg.Logger), requestID(ctx)))
	e, err := o.entryFor(ctx, "", id)
	if err != nil {
		return err
	}
	ctx = sandboxLog(ctx, e.sb)
	// Requests for it wait for the move (Holds), then go where it went.
	moved := make(chan struct{})
	o.mu.Lock()
	o.moving[id] = moved
	o.mu.Unlock()
	defer func() {
		o.mu.Lock()
		delete(o.moving, id)
		o.mu.Unlock()
		close(moved)
	}()
	e.mu.Lock()
	running := !e.killed && e.sb.State == store.StateRunning
	e.mu.Unlock()
	if !running {
		return fmt.Errorf("%w: %s is not running: only running sandboxes move", ErrConflict, id)
	}
	if err := o.volumesMovable(e.sb.TeamID, id); err != nil {
		return fmt.Errorf("move %s: %w", id, err) // before its pause: a drain's next round does not pause it for nothing
	}
	if err := o.pause(ctx, e, reason.PauseSnapshot); err != nil {
		return fmt.Errorf("move %s: %w", id, err)
	}
	e.mu.Lock()
	shared := e.shared
	e.mu.Unlock()
	mounts, merr := o.volumeMountsByID(e.sb.TeamID, id)
	back := func(cause error) error {
		// Its volumes are held here again (released for the move, they are this node's copy,
		// unless another node took them meanwhile: then its resume fails and says so).
		if err := o.holdVolumes(ctx, mounts); err != nil {
			cause = errors.Join(cause, err)
		}
		if _, rerr := o.resume(ctx, e, remaining(e.sb), false); rerr != nil {
			return errors.Join(cause, fmt.Errorf("and it did not resume here: %w", rerr))
		}
		return cause
	}
	if !shared {
		return back(fmt.Errorf("move %s: its checkpoint is not in the object store", id))
	}
	if merr != nil {
		return back(fmt.Errorf("move %s: its volumes: %w", id, merr))
	}
	// Its volumes go to the object store and this node lets go of them: the node it moves
	// to holds them next, at the same paths.
	if err := o.releaseVolumesOf(ctx, id, mounts); err != nil {
		return back(fmt.Errorf("move %s: %w", id, err))
	}
	// Handed over: the record names to, this node lets go of it (its checkpoint stays in the
	// object store until to has it running).
	e.mu.Lock()
	e.sb.Node, e.sb.UpdatedAt = to, time.Now()
	err = o.cfg.Store.UpdateSandbox(ctx, e.sb)
	if err == nil {
		o.mu.Lock()
		delete(o.live, id)
		o.mu.Unlock()
		o.unplace(ctx, id)
	}
	e.mu.Unlock()
	if err != nil {
		e.sb.Node = o.cfg.Node
		return back(fmt.Errorf("move %s: %w", id, err))
	}
	actx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	err = adopt(actx)
	cancel()
	if err != nil {
		// Taken back: the record names this node again, and it runs here.
		e.mu.Lock()
		e.sb.Node, e.sb.UpdatedAt = o.cfg.Node, time.Now()
		uerr := o.cfg.Store.UpdateSandbox(ctx, e.sb)
		e.mu.Unlock()
		o.mu.Lock()
		o.live[id] = e
		o.mu.Unlock()
		if settle, perr := o.place(ctx, e.sb); perr != nil {
			o.logger(ctx).Warn("moved back without a reservation", telemetry.KeyError, perr.Error())
		} else {
			settle() // it is live again: its start is no start under way
		}
		return back(errors.Join(fmt.Errorf("move %s to %s: %w", id, to, err), uerr))
	}
	// Running on to: what is left of it here goes, without a kill (it lives on).
	e.mu.Lock()
	e.killed = true // no request here acts on it any more
	e.closeAll()
	_ = o.teardown(ctx, e)
	e.stopWatching()
	e.closeLog()
	e.mu.Unlock()
	telemetry.SandboxesLive.WithLabelValues(string(store.StatePaused)).Dec()
	o.logger(ctx).Info("sandbox moved to another node", telemetry.KeyNodeTo, to, telemetry.KeyDurationMS, time.Since(begun).Milliseconds())
	return nil
}

// releaseVolumesOf publishes and lets go of the volumes sandbox id (checkpointed for a move)
// mounts; another live sandbox of this node mounting one of them refuses the move.
func (o *Orchestrator) releaseVolumesOf(ctx context.Context, id string, mounts []VolumeMount) error {
	others := func(sid string) bool { return sid != id && o.HoldsVolumes(sid) }
	for _, m := range mounts {
		begun := time.Now()
		if err := o.cfg.Volumes.Release(ctx, m.Name, others); err != nil {
			return err
		}
		o.logger(ctx).Info("volume published for the move", telemetry.KeyVolumeID, m.Name, telemetry.KeyDurationMS, time.Since(begun).Milliseconds())
	}
	return nil
}

// holdVolumes holds on this node the volumes mounts name by id (Volumes.Hold).
func (o *Orchestrator) holdVolumes(ctx context.Context, mounts []VolumeMount) error {
	var errs []error
	for _, m := range mounts {
		vol, err := o.cfg.Volumes.ByID(m.Name)
		if err == nil {
			err = o.cfg.Volumes.Hold(ctx, vol)
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// volumesMovable says whether sandbox id's volumes can go with it: ErrConflict when another
// live sandbox of this node mounts one (a volume is held by one node at a time, so the two
// cannot move one after the other).
func (o *Orchestrator) volumesMovable(teamID, id string) error {
	mounts, err := o.volumeMountsByID(teamID, id)
	if err != nil {
		return err
	}
	for _, m := range mounts {
		vol, err := o.cfg.Volumes.ByID(m.Name)
		if err != nil {
			continue // deleted: nothing to carry
		}
		for _, other := range o.cfg.Volumes.Holders(vol, o.HoldsVolumes) {
			if other != id {
				return fmt.Errorf("%w: volume %s is mounted in sandbox %s on this node too: a volume is on one node at a time, so the sandboxes sharing it stay (kill the other to move this one)", ErrConflict, vol.Name, other)
			}
		}
	}
	return nil
}
