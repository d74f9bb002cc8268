package orchestrator

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/cove-dev/cove/internal/builder/template"
	"github.com/cove-dev/cove/internal/observe/collect"
	"github.com/cove-dev/cove/internal/observe/events"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/sandbox/runtime"
	"github.com/cove-dev/cove/internal/store"
	cove "github.com/cove-dev/cove/sdk"
	"github.com/cove-dev/cove/sdk/reason"
)

// entryFor returns the live entry of a sandbox of team (any team when teamID is ""), or the
// error a client gets for a sandbox that is gone or was never theirs.
func (o *Orchestrator) entryFor(ctx context.Context, teamID, id string) (*entry, error) {
	o.mu.Lock()
	e := o.live[id]
	o.mu.Unlock()
	if e != nil && (teamID == "" || e.sb.TeamID == teamID) {
		return e, nil
	}
	sb, err := o.cfg.Store.GetSandbox(ctx, id)
	if err != nil || (teamID != "" && sb.TeamID != teamID) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if sb.State == store.StateKilled {
		return nil, gone(sb)
	}
	if o.cfg.Mover != nil && sb.Node == o.cfg.Node && sb.Node != "" && sb.State == store.StatePaused && sb.PauseKind == reason.PauseSnapshot {
		// Handed to this node by a draining one (Migrate) and not adopted yet: a request that
		// arrives first takes it over (one take-over at a time: the adopt call finds it live).
		if _, err := o.takeOver(ctx, sb, remaining(sb)); err != nil {
			return nil, err
		}
		o.mu.Lock()
		e := o.live[id]
		o.mu.Unlock()
		if e != nil {
			return e, nil
		}
	}
	return nil, fmt.Errorf("%w: %s (recorded %s but not held by this server)", ErrNotFound, id, sb.State)
}

// Get returns a sandbox of the team; *GoneError for a killed one.
func (o *Orchestrator) Get(ctx context.Context, teamID, id string) (*store.Sandbox, error) {
	e, err := o.entryFor(ctx, teamID, id)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.killed {
		return nil, gone(e.sb)
	}
	return copySandbox(e.sb), nil
}

// Lookup is Get for any team, for the proxy.
func (o *Orchestrator) Lookup(ctx context.Context, id string) (*store.Sandbox, error) {
	return o.Get(ctx, "", id)
}

// Authorized says a proxy caller may learn sandbox id's state: it exists (killed
// included) and is insecure, or accessToken is its envd access token.
func (o *Orchestrator) Authorized(ctx context.Context, id, accessToken string) bool {
	var token string
	o.mu.Lock()
	e := o.live[id]
	o.mu.Unlock()
	if e != nil {
		e.mu.Lock()
		token = e.sb.EnvdAccessToken
		e.mu.Unlock()
	} else {
		sb, err := o.cfg.Store.GetSandbox(ctx, id)
		if err != nil {
			return false
		}
		token = sb.EnvdAccessToken
	}
	return token == "" || subtle.ConstantTimeCompare([]byte(token), []byte(accessToken)) == 1
}

// List lists a team's sandboxes from the store.
func (o *Orchestrator) List(ctx context.Context, f store.SandboxFilter) (*store.SandboxPage, error) {
	return o.cfg.Store.ListSandboxes(ctx, f)
}

// Kill kills a sandbox of the team for the given reason.
func (o *Orchestrator) Kill(ctx context.Context, teamID, id string, why reason.KillReason, apiKeyID string) error {
	e, err := o.entryFor(ctx, teamID, id)
	if err != nil {
		return err
	}
	return o.kill(sandboxLog(ctx, e.sb), e, why, apiKeyID, "")
}

// kill destroys the sandbox and records why. It is the one kill path: every reason goes
// through it, so the log line, the record and the counter never disagree.
func (o *Orchestrator) kill(ctx context.Context, e *entry, why reason.KillReason, apiKeyID, detail string) error {
	begun := time.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.killed {
		return gone(e.sb)
	}
	ctx = sandboxLog(ctx, e.sb)
	wasState := e.sb.State
	e.killed = true
	e.closeAll()
	pm := &cove.Postmortem{At: time.Now().UTC()}
	var destroyErr error
	if !e.remote {
		pm = o.postmortem(ctx, e)
		destroyErr = o.teardown(ctx, e)
		o.unplace(ctx, e.sb.ID) // a lost node's are the sweeper's to give back
		if e.onDisk && o.cfg.Mover != nil {
			o.cfg.Mover.Forget(context.WithoutCancel(ctx), e.sb.ID)
		}
	}
	if detail != "" {
		pm.Detail = detail
	}
	e.stopWatching()
	e.closeLog()

	now := time.Now()
	if e.collector != nil {
		// After the pipes drain, what is still running was killed with the sandbox.
		// The kill request may end first: its values (request id, logger) go on, its cancel does not.
		go func(ctx context.Context, c *collect.Collector, why reason.KillReason, adopted bool) {
			e.drainers.Wait()
			c.SandboxKilled(ctx, why, now)
			if adopted {
				// Commands started before this server adopted the sandbox are not c's.
				o.closeOpenCommands(ctx, e.sb.ID, why)
			}
		}(context.WithoutCancel(ctx), e.collector, why, e.adopted)
	}
	if parsed, err := reason.ParseKillReason(string(why)); err != nil {
		// Not a closed-set reason: record it as unknown rather than as "", and say so.
		telemetry.Logger(ctx).Warn("kill: reason not in the closed set, recorded as unknown", telemetry.KeyError, err.Error())
		why = reason.KillUnknown
	} else {
		why = parsed
	}
	e.sb.State, e.sb.KilledAt, e.sb.KillReason = store.StateKilled, &now, why
	e.sb.KillRequestID, e.sb.KillAPIKeyID, e.sb.UpdatedAt = requestID(ctx), apiKeyID, now
	storeErr := o.cfg.Store.UpdateSandbox(context.WithoutCancel(ctx), e.sb)

	o.mu.Lock()
	delete(o.live, e.sb.ID)
	o.mu.Unlock()
	o.takeovers.Delete(e.sb.ID) // a killed sandbox is taken over by no node again
	o.nudge()
	if !e.remote && (len(e.volumes) > 0 || e.adopted) && o.cfg.Volumes != nil && o.cfg.Volumes.Shared() {
		go o.publishVolumes(context.WithoutCancel(ctx), e.sb.TeamID, e.sb.ID, e.volumes) // in a cluster; a kill does not wait
	}
	data := events.KilledData(why, events.ExecutionOf(e.sb, now))
	data.Postmortem, data.EndAt = pm, e.sb.EndAt.UTC() // the TTL, which a timeout kill reached
	o.emit(ctx, events.SandboxKilled, e.sb, data)
	telemetry.SandboxesKilled.WithLabelValues(why.String()).Inc()
	if !e.remote {
		telemetry.SandboxesLive.WithLabelValues(string(wasState)).Dec()
	}
	telemetry.SandboxTransitionSeconds.WithLabelValues("kill").Observe(time.Since(begun).Seconds())

	ctx = telemetry.With(ctx, telemetry.KeyKillReason, why.String())
	if apiKeyID != "" {
		ctx = telemetry.With(ctx, telemetry.KeyAPIKeyID, apiKeyID)
	}
	attrs := []any{telemetry.KeyStateBefore, string(wasState),
		telemetry.KeyExecutionMS, now.Sub(e.sb.StartedAt).Milliseconds(), telemetry.KeyDurationMS, time.Since(begun).Milliseconds()}
	if detail != "" {
		attrs = append(attrs, telemetry.KeyDetail, detail)
	}
	if err := errors.Join(destroyErr, storeErr); err != nil {
		attrs = append(attrs, telemetry.KeyError, err.Error())
		o.logger(ctx).Error("sandbox killed", attrs...)
		return fmt.Errorf("kill %s: %w", e.sb.ID, err)
	}
	o.logger(ctx).Info("sandbox killed", attrs...)
	return nil
}

// teardown removes what this node holds of e: its processes and files (Destroy), its network,
// its kept secrets and boot environment. Caller holds e.mu. A kill calls it, and so does a move
// once the sandbox runs on another node.
func (o *Orchestrator) teardown(ctx context.Context, e *entry) error {
	err := o.cfg.Runtime.Destroy(context.WithoutCancel(ctx), e.sb.ID)
	o.detachNetwork(ctx, e.sb.ID)
	o.dropSecrets(ctx, e)
	if e.sb.PauseKind == reason.PauseFilesystem {
		o.dropBootEnv(ctx, e)
	}
	return err
}

// maxPostmortemProcs bounds the process list a post-mortem keeps.
const maxPostmortemProcs = 50

// postmortem records what the sandbox looked like at its kill: its processes (biggest memory
// first, so an OOM shows who held the memory), its resource use and its last output lines.
// Caller holds e.mu; the sandbox still exists.
func (o *Orchestrator) postmortem(ctx context.Context, e *entry) *cove.Postmortem {
	pm := &cove.Postmortem{At: time.Now().UTC()}
	if procs, err := o.cfg.Runtime.Processes(ctx, e.sb.ID); err == nil {
		pm.Processes = make([]cove.PostmortemProcess, 0, min(len(procs), maxPostmortemProcs))
		for _, p := range procs[:min(len(procs), maxPostmortemProcs)] {
			cmd := p.Command
			if e.collector != nil {
				cmd = e.collector.Redact(cmd)
			}
			pm.Processes = append(pm.Processes, cove.PostmortemProcess{PID: p.PID, PPID: p.PPID, State: p.State, Command: cmd, RSSBytes: p.RSSBytes})
		}
		pm.ProcessCount = len(procs)
	}
	if st, err := o.cfg.Runtime.Stats(ctx, e.sb.ID); err == nil {
		pm.Resources = &cove.Resources{MemoryBytes: st.MemoryUsage, MemoryMaxBytes: st.MemoryMaxUsage,
			MemoryLimitBytes: st.MemoryLimit, OOMKills: st.OOMKills, CPUSeconds: st.CPU.Seconds(),
			PIDs: st.PIDs, PIDsLimit: st.PIDsLimit}
	}
	if e.collector != nil {
		pm.LastOutput = e.collector.Recent()
	}
	return pm
}

// closeAll cuts every connection the proxy registered for this sandbox. Caller holds e.mu.
func (e *entry) closeAll() {
	for c := range e.closers {
		_ = c.c.Close()
		delete(e.closers, c)
	}
}

// SetTimeout sets the sandbox's TTL to now + d (it may shorten it).
func (o *Orchestrator) SetTimeout(ctx context.Context, teamID, id string, d time.Duration) error {
	return o.setTTL(ctx, teamID, id, d, true)
}

// Refresh extends the sandbox's TTL to now + d; it never shortens it.
func (o *Orchestrator) Refresh(ctx context.Context, teamID, id string, d time.Duration) error {
	if d == 0 {
		d = 60 * time.Second
	}
	return o.setTTL(ctx, teamID, id, d, false)
}

func (o *Orchestrator) setTTL(ctx context.Context, teamID, id string, d time.Duration, mayShorten bool) error {
	if d < 0 || d > o.cfg.MaxTimeout {
		return fmt.Errorf("%w: timeout must be between 0 and %s", ErrInvalid, o.cfg.MaxTimeout)
	}
	e, err := o.entryFor(ctx, teamID, id)
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.killed {
		return gone(e.sb)
	}
	end := time.Now().Add(d)
	if !mayShorten && end.Before(e.sb.EndAt) {
		return nil
	}
	old := e.sb.EndAt
	e.sb.EndAt, e.sb.UpdatedAt = end, time.Now()
	if err := o.cfg.Store.UpdateSandbox(ctx, e.sb); err != nil {
		return fmt.Errorf("set timeout of %s: %w", id, err)
	}
	o.nudge()
	o.emit(ctx, events.SandboxUpdated, e.sb, events.UpdatedData(end, d))
	o.logger(sandboxLog(ctx, e.sb)).Info("sandbox timeout set", telemetry.KeyEndAt, end.UTC(), telemetry.KeyPreviousEndAt, old.UTC(), telemetry.KeyTimeoutS, d.Seconds())
	return nil
}

// Pause pauses a running sandbox the server's default way (Config.PauseKind). ErrConflict
// if it is paused.
func (o *Orchestrator) Pause(ctx context.Context, teamID, id string) error {
	return o.PauseWith(ctx, teamID, id, PauseOptions{})
}

// PauseOptions choose how a sandbox is paused.
type PauseOptions struct {
	// Kind is snapshot (to disk, memory freed), freeze (in place, memory stays) or
	// filesystem (files kept, processes stopped: the resume reboots); the server's default
	// when "".
	Kind reason.PauseKind
}

// PauseWith pauses a running sandbox as opts say. A snapshot that fails (a full disk, say)
// fails the pause and the sandbox runs on. ErrConflict if it is paused.
func (o *Orchestrator) PauseWith(ctx context.Context, teamID, id string, opts PauseOptions) error {
	e, err := o.entryFor(ctx, teamID, id)
	if err != nil {
		return err
	}
	return o.pause(sandboxLog(ctx, e.sb), e, opts.Kind)
}

// checkpointer is the runtime's checkpoint side, or an error saying why there is none.
func (o *Orchestrator) checkpointer() (runtime.Checkpointer, error) {
	ck, ok := o.cfg.Runtime.(runtime.Checkpointer)
	if !ok {
		return nil, fmt.Errorf("%w: this runtime cannot snapshot sandboxes", ErrInvalid)
	}
	if err := ck.CanCheckpoint(); err != nil {
		return nil, fmt.Errorf("%w: snapshots unavailable: %v", ErrInvalid, err)
	}
	return ck, nil
}

func (o *Orchestrator) pause(ctx context.Context, e *entry, kind reason.PauseKind) error {
	begun := time.Now()
	if kind == "" {
		kind = o.cfg.PauseKind
	}
	if _, err := reason.ParsePauseKind(string(kind)); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.killed:
		return gone(e.sb)
	case e.sb.State == store.StatePaused:
		return fmt.Errorf("%w: sandbox %s is already paused", ErrConflict, e.sb.ID)
	}
	ev := events.PausedData(events.Execution{})
	var zeroBytes int64 // touched zero pages the snapshot holds as holes
	switch kind {
	case reason.PauseSnapshot:
		ck, err := o.checkpointer()
		if err != nil {
			return fmt.Errorf("pause %s: %w", e.sb.ID, err)
		}
		e.closeAll() // the proxy's streams, and the server's own connections to envd
		if e.envd != nil {
			e.envd.CloseIdleConnections()
		}
		e.stopWatching() // the cgroup the OOM watch reads goes with the processes
		info, err := ck.Checkpoint(ctx, e.sb.ID)
		if err != nil {
			o.watchOOM(ctx, e)
			return fmt.Errorf("pause %s: snapshot failed, the sandbox runs on: %w", e.sb.ID, err)
		}
		e.onDisk = true
		e.shared = o.cfg.Mover != nil && o.shareCheckpoint(ctx, e, ck) == nil // logged: unshared, it resumes here only
		ev.SnapshotBytes, ev.SnapshotMS, zeroBytes = info.Bytes, info.Duration.Milliseconds(), info.ZeroBytes
		telemetry.SnapshotSeconds.Observe(info.Duration.Seconds())
		telemetry.SnapshotBytes.Observe(float64(info.Bytes))
	case reason.PauseFilesystem:
		kept, err := o.stopKeepFiles(ctx, e)
		if err != nil {
			return fmt.Errorf("pause %s: keeping its files failed: %w", e.sb.ID, err)
		}
		ev.SnapshotBytes, ev.SnapshotMS = kept.Bytes, kept.Duration.Milliseconds()
	default:
		if err := o.cfg.Runtime.Freeze(ctx, e.sb.ID); err != nil {
			return fmt.Errorf("pause %s: %w", e.sb.ID, err)
		}
		e.closeAll() // streams through a frozen envd would hang: cut them
	}
	now := time.Now()
	e.sb.State, e.sb.PausedAt, e.sb.UpdatedAt, e.sb.PauseKind = store.StatePaused, &now, now, kind
	if err := o.cfg.Store.UpdateSandbox(ctx, e.sb); err != nil {
		return fmt.Errorf("pause %s: %w", e.sb.ID, err)
	}
	took := time.Since(begun)
	ev.Execution, ev.Kind, ev.DurationMS = events.ExecutionOf(e.sb, now), kind.String(), took.Milliseconds()
	o.emit(ctx, events.SandboxPaused, e.sb, ev)
	telemetry.SandboxesLive.WithLabelValues(string(store.StateRunning)).Dec()
	telemetry.SandboxesLive.WithLabelValues(string(store.StatePaused)).Inc()
	telemetry.SandboxTransitionSeconds.WithLabelValues("pause").Observe(took.Seconds())
	o.nudge()
	attrs := []any{telemetry.KeyPauseKind, kind.String(), telemetry.KeyDurationMS, float64(took.Microseconds()) / 1000}
	if ev.SnapshotBytes > 0 {
		attrs = append(attrs, telemetry.KeySnapshotBytes, ev.SnapshotBytes, telemetry.KeySnapshotZeroBytes, zeroBytes)
	}
	o.logger(ctx).Info("sandbox paused", attrs...)
	return nil
}

// restore brings a sandbox paused as a snapshot back: the same processes and memory on new
// pipes, watched again, with envd answering. Caller holds e.mu.
func (o *Orchestrator) restore(ctx context.Context, e *entry) (time.Duration, error) {
	begun := time.Now()
	ck, err := o.checkpointer()
	if err != nil {
		return 0, err
	}
	rsb, err := ck.Restore(ctx, e.sb.ID)
	if err != nil {
		return 0, err
	}
	e.onDisk = false
	if e.shared {
		e.shared = false
		go o.cfg.Mover.Forget(context.WithoutCancel(ctx), e.sb.ID) // it runs here again
	}
	o.drain(ctx, e, rsb, CreateRequest{})
	o.watchOOM(ctx, e)
	o.watchInit(e)
	if e.envd == nil {
		e.envd = o.envdClient(e.sb.ID)
	}
	if err := waitHealthy(ctx, e.envd, 10*time.Second); err != nil {
		return 0, fmt.Errorf("envd did not answer after the restore: %w", err)
	}
	took := time.Since(begun)
	telemetry.RestoreSeconds.Observe(took.Seconds())
	return took, nil
}

// Resume thaws a paused sandbox with a new TTL. ErrConflict if it is running.
func (o *Orchestrator) Resume(ctx context.Context, teamID, id string, timeout time.Duration) (*store.Sandbox, error) {
	e, err := o.entryFor(ctx, teamID, id)
	if errors.Is(err, ErrNotFound) {
		if sb, ok := o.pausedElsewhere(ctx, teamID, id); ok {
			return o.takeOver(ctx, sb, timeout)
		}
	}
	if err != nil {
		return nil, err
	}
	resumed, err := o.resume(sandboxLog(ctx, e.sb), e, timeout, false)
	if err != nil {
		return nil, err
	}
	if !resumed {
		return nil, fmt.Errorf("%w: sandbox %s is running", ErrConflict, id)
	}
	return o.Get(ctx, teamID, id)
}

// Connect makes a sandbox usable: it extends a running sandbox's TTL (never shortening it)
// or resumes a paused one, and says which.
func (o *Orchestrator) Connect(ctx context.Context, teamID, id string, timeout time.Duration) (*store.Sandbox, bool, error) {
	e, err := o.entryFor(ctx, teamID, id)
	if errors.Is(err, ErrNotFound) {
		if sb, ok := o.pausedElsewhere(ctx, teamID, id); ok {
			out, err := o.takeOver(ctx, sb, timeout)
			return out, err == nil, err
		}
	}
	if err != nil {
		return nil, false, err
	}
	resumed, err := o.resume(sandboxLog(ctx, e.sb), e, timeout, true)
	if err != nil {
		return nil, false, err
	}
	sb, err := o.Get(ctx, teamID, id)
	return sb, resumed, err
}

// resume thaws e if paused (reporting true); if running, with extend it lengthens the TTL.
func (o *Orchestrator) resume(ctx context.Context, e *entry, timeout time.Duration, extend bool) (bool, error) {
	begun := time.Now()
	timeout, err := o.clampTimeout(timeout)
	if err != nil {
		return false, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.killed {
		return false, gone(e.sb)
	}
	end := time.Now().Add(timeout)
	if e.sb.State == store.StateRunning {
		if extend && end.After(e.sb.EndAt) {
			e.sb.EndAt, e.sb.UpdatedAt = end, time.Now()
			if err := o.cfg.Store.UpdateSandbox(ctx, e.sb); err != nil {
				return false, err
			}
			o.nudge()
		}
		if extend {
			o.emit(ctx, events.SandboxConnected, e.sb, &cove.ConnectedEventData{EndAt: e.sb.EndAt.UTC()})
		}
		return false, nil
	}
	if _, err := o.cfg.Templates.Get(e.sb.TemplateID); errors.Is(err, template.ErrNotFound) {
		// The template under a paused sandbox was removed: what it would resume onto is gone.
		go func() {
			_ = o.kill(o.systemContext(), e, reason.KillTemplateMissing, "", "template "+e.sb.TemplateID+" was removed while the sandbox was paused")
		}()
		return false, fmt.Errorf("resume %s: template %s was removed: %w", e.sb.ID, e.sb.TemplateID, &GoneError{ID: e.sb.ID, Reason: reason.KillTemplateMissing, At: time.Now()})
	}
	kind, rebooted := reason.PauseFreeze, false
	if e.sb.PauseKind == reason.PauseFilesystem {
		kind, rebooted = reason.PauseFilesystem, true
		tmpl, err := o.cfg.Templates.Get(e.sb.TemplateID)
		if err == nil {
			err = o.reboot(ctx, e, tmpl)
		}
		if err != nil {
			go func() { _ = o.kill(o.systemContext(), e, reason.KillResumeFailed, "", err.Error()) }()
			return false, fmt.Errorf("resume %s: reboot: %w", e.sb.ID, err)
		}
	} else if e.onDisk {
		kind = reason.PauseSnapshot
		if _, err := o.restore(ctx, e); err != nil {
			go func() { _ = o.kill(o.systemContext(), e, reason.KillResumeFailed, "", err.Error()) }()
			return false, fmt.Errorf("resume %s: restore: %w", e.sb.ID, err)
		}
	} else if err := o.cfg.Runtime.Thaw(ctx, e.sb.ID); err != nil {
		go func() { _ = o.kill(o.systemContext(), e, reason.KillResumeFailed, "", err.Error()) }()
		return false, fmt.Errorf("resume %s: %w", e.sb.ID, err)
	}
	e.sb.State, e.sb.PausedAt, e.sb.EndAt, e.sb.UpdatedAt, e.sb.PauseKind = store.StateRunning, nil, end, time.Now(), ""
	if err := o.cfg.Store.UpdateSandbox(ctx, e.sb); err != nil {
		return false, err
	}
	o.emit(ctx, events.SandboxResumed, e.sb, &cove.ResumedEventData{EndAt: end.UTC(), TimeoutSeconds: timeout.Seconds(),
		Kind: kind.String(), DurationMS: time.Since(begun).Milliseconds(), Rebooted: rebooted})
	telemetry.SandboxesLive.WithLabelValues(string(store.StatePaused)).Dec()
	telemetry.SandboxesLive.WithLabelValues(string(store.StateRunning)).Inc()
	telemetry.SandboxTransitionSeconds.WithLabelValues("resume").Observe(time.Since(begun).Seconds())
	o.nudge()
	o.logger(ctx).Info("sandbox resumed", telemetry.KeyPauseKind, kind.String(), telemetry.KeyDurationMS, float64(time.Since(begun).Microseconds())/1000, telemetry.KeyTimeoutS, timeout.Seconds())
	return true, nil
}

// DialPort opens a connection to a port inside the sandbox, resuming it first when it is
// paused with auto-resume on. A sandbox paused without its memory is never resumed by
// traffic (*PausedError with WithoutMemory): its resume is a reboot, which only a client's
// connect or resume asks for.
func (o *Orchestrator) DialPort(ctx context.Context, id string, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("%w: port %d", ErrInvalid, port)
	}
	e, err := o.entryFor(ctx, "", id)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	state, auto, killed, kind := e.sb.State, e.sb.AutoResume, e.killed, e.sb.PauseKind
	e.mu.Unlock()
	if killed {
		return nil, o.goneOf(e)
	}
	if state == store.StatePaused {
		if kind == reason.PauseFilesystem {
			return nil, &PausedError{ID: id, WithoutMemory: true}
		}
		if !auto {
			return nil, &PausedError{ID: id}
		}
		if _, err := o.resume(sandboxLog(ctx, e.sb), e, 0, true); err != nil {
			return nil, err
		}
	}
	return o.cfg.Runtime.Dial(ctx, id, "tcp", fmt.Sprintf("127.0.0.1:%d", port))
}

// Watch registers c to be closed when the sandbox is paused or killed; stop unregisters it.
func (o *Orchestrator) Watch(id string, c io.Closer) (stop func()) {
	o.mu.Lock()
	e := o.live[id]
	o.mu.Unlock()
	if e == nil {
		_ = c.Close()
		return func() {}
	}
	cl := &closer{c: c}
	e.mu.Lock()
	if e.killed {
		e.mu.Unlock()
		_ = c.Close()
		return func() {}
	}
	e.closers[cl] = struct{}{}
	e.mu.Unlock()
	return func() {
		e.mu.Lock()
		delete(e.closers, cl)
		e.mu.Unlock()
	}
}

// entries copies the live entries. Lock order: an entry's lock is never taken while o.mu is
// held (kill holds e.mu and then takes o.mu), so callers lock entries only on the copy.
func (o *Orchestrator) entries() []*entry {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]*entry, 0, len(o.live))
	for _, e := range o.live {
		out = append(out, e)
	}
	return out
}

// Running lists the running sandboxes (for the resource sampler).
func (o *Orchestrator) Running() []*store.Sandbox {
	var out []*store.Sandbox
	for _, e := range o.entries() {
		e.mu.Lock()
		if e.sb.State == store.StateRunning && !e.killed {
			out = append(out, copySandbox(e.sb))
		}
		e.mu.Unlock()
	}
	return out
}

// SecureSandboxes lists live secure sandboxes with their tokens, to route signed URLs.
func (o *Orchestrator) SecureSandboxes(ctx context.Context) []*store.Sandbox {
	var out []*store.Sandbox
	for _, e := range o.entries() {
		e.mu.Lock()
		if e.sb.Secure && !e.killed {
			out = append(out, copySandbox(e.sb))
		}
		e.mu.Unlock()
	}
	return out
}

// evictor pauses (autoPause) or kills sandboxes whose TTL passed. It sleeps until the
// earliest deadline; every TTL change wakes it to look again.
func (o *Orchestrator) evictor() {
	defer o.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		next := o.evictDue()
		wait := time.Hour
		if !next.IsZero() {
			wait = max(time.Until(next), 0)
		}
		timer.Reset(wait)
		select {
		case <-o.stop:
			return
		case <-o.wake:
		case <-timer.C:
		}
	}
}

// evictDue acts on every running sandbox past its TTL and returns the next deadline.
func (o *Orchestrator) evictDue() time.Time {
	now := time.Now()
	var due []*entry
	var next time.Time
	for _, e := range o.entries() {
		e.mu.Lock()
		end, running := e.sb.EndAt, e.sb.State == store.StateRunning && !e.killed
		e.mu.Unlock()
		if !running {
			continue
		}
		if !end.After(now) {
			due = append(due, e)
		} else if next.IsZero() || end.Before(next) {
			next = end
		}
	}
	for _, e := range due {
		ctx := o.systemContext()
		if e.sb.AutoPause {
			if err := o.pause(sandboxLog(ctx, e.sb), e, e.sb.AutoPauseKind); err != nil {
				o.logger(ctx).Error("timeout pause failed; killing", telemetry.KeySandboxID, e.sb.ID, "error", err.Error())
				_ = o.kill(ctx, e, reason.KillTimeout, "", "auto-pause failed: "+err.Error())
			}
			continue
		}
		_ = o.kill(ctx, e, reason.KillTimeout, "", "")
	}
	return next
}

// Recover runs at start-up: every sandbox recorded as live from a previous run is adopted
// (its processes, envd, timers, sampling and output collection carry on; see adopt), and
// one that cannot be, because its processes died while no server watched, is killed with
// reason orphaned and a post-mortem that says why (never lost silently). Runtime leftovers
// without a record are destroyed.
func (o *Orchestrator) Recover(ctx context.Context) error {
	ctx = telemetry.WithRequestID(telemetry.WithLogger(ctx, o.cfg.Logger), SystemRequestID)
	recs, err := o.cfg.Store.LiveSandboxes(ctx)
	if err != nil {
		return fmt.Errorf("recover: %w", err)
	}
	for _, sb := range recs {
		if sb.Node != o.cfg.Node {
			continue // another node's: it adopts its own, or the cluster declares it lost
		}
		telemetry.SandboxesLive.WithLabelValues(string(sb.State)).Inc()
		why := o.adopt(ctx, sb)
		if why == nil {
			continue
		}
		e := &entry{sb: sb, closers: map[*closer]struct{}{}}
		if err := o.kill(ctx, e, reason.KillOrphaned, "", why.Error()); err != nil {
			o.logger(ctx).Error("recover: kill orphaned sandbox", telemetry.KeySandboxID, sb.ID, "error", err.Error())
		}
		o.closeOpenCommands(ctx, sb.ID, reason.KillOrphaned)
	}
	o.pruneSecrets(ctx)
	if o.cfg.Network != nil {
		// What an earlier server recorded for sandboxes that are gone now.
		if err := o.cfg.Network.DropUnclaimed(ctx); err != nil {
			o.logger(ctx).Error("recover: remove unclaimed networks", "error", err.Error())
		}
	}
	ids, err := o.cfg.Runtime.List(ctx)
	if err != nil {
		return fmt.Errorf("recover: list runtime sandboxes: %w", err)
	}
	for _, id := range ids {
		o.mu.Lock()
		_, held := o.live[id]
		o.mu.Unlock()
		if held {
			continue
		}
		if err := o.cfg.Runtime.Destroy(ctx, id); err != nil {
			o.logger(ctx).Error("recover: destroy leftover", telemetry.KeySandboxID, id, "error", err.Error())
			continue
		}
		o.logger(ctx).Info("recover: destroyed leftover sandbox without a record", telemetry.KeySandboxID, id)
	}
	o.openPools()
	return nil
}

// closeOpenCommands ends the records a crash left open: the commands died with the sandbox.
func (o *Orchestrator) closeOpenCommands(ctx context.Context, id string, why reason.KillReason) {
	if o.cfg.Commands == nil {
		return
	}
	n, err := o.cfg.Commands.CloseOpenCommands(ctx, id, time.Now(), why.String())
	if err != nil {
		o.logger(ctx).Error("recover: close open command records", telemetry.KeySandboxID, id, "error", err.Error())
		return
	}
	if n > 0 {
		o.logger(ctx).Info("recover: closed open command records", telemetry.KeySandboxID, id, telemetry.KeyCommands, n, telemetry.KeyKillReason, why.String())
	}
}

// Shutdown stops the evictor and kills every live sandbox with reason server_shutdown.
func (o *Orchestrator) Shutdown(ctx context.Context) {
	o.closed.Do(func() { close(o.stop) })
	ctx = telemetry.WithRequestID(telemetry.WithLogger(ctx, o.cfg.Logger), SystemRequestID)
	o.closePools(ctx)
	for _, e := range o.entries() {
		_ = o.kill(ctx, e, reason.KillServerShutdown, "", "")
	}
	o.releaseVolumes(ctx)
}
