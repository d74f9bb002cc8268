package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/sandbox/runtime"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/sdk/reason"
)

// adoptHealthWait bounds how long an adopted running sandbox's envd has to answer.
const adoptHealthWait = 10 * time.Second

// adopt takes over a sandbox an earlier server left live: the runtime hands back its init
// and output FIFOs, collection and the OOM and exit watches start again, and it joins the
// live set, so its TTL is the evictor's again (one that ran out while no server ran is acted
// on at once: killed with reason timeout, or paused with autoPause). Where the record and the
// runtime disagree (the server died between the two halves of a pause or resume), the record
// wins: it is what the client last saw succeed. The error says why the sandbox could not be
// adopted, for its post-mortem.
func (o *Orchestrator) adopt(ctx context.Context, sb *store.Sandbox) (err error) {
	ctx = sandboxLog(ctx, sb)
	begun := time.Now()
	if sb.State == store.StatePaused && sb.PauseKind == reason.PauseFilesystem {
		return o.adoptKept(ctx, sb, begun)
	}
	ad, ok := o.cfg.Runtime.(runtime.Adopter)
	if !ok {
		return errors.New("the server restarted and its runtime cannot take sandboxes over")
	}
	rsb, state, err := ad.Adopt(ctx, sb.ID)
	switch {
	case errors.Is(err, runtime.ErrNotFound):
		return fmt.Errorf("its processes died while the server was down (it was %s; runtime state %s)", sb.State, state)
	case err != nil:
		return fmt.Errorf("the server restarted and could not take it over: %w", err)
	}
	e := &entry{sb: sb, closers: map[*closer]struct{}{}, adopted: true}
	// Its network first: a snapshot restores into its namespace, and a running sandbox's
	// egress rules, resolver and proxy state come back.
	req, err := o.reclaimNetwork(ctx, e)
	if state == runtime.StateCheckpointed {
		if err != nil {
			return fmt.Errorf("the server restarted and could not give its snapshot its network back: %w", err)
		}
		return o.adoptSnapshot(ctx, e, req, begun)
	}
	if err != nil {
		// It runs on, reachable through its namespace, without egress: better than killed.
		o.logger(ctx).Error("sandbox adopted without its network", "error", err.Error())
		sb.AllowInternet, err = false, nil // handled: without this the sandbox was killed below
	}
	defer func() {
		if err != nil {
			e.stopWatching()
			for _, p := range e.pipes {
				_ = p.Close()
			}
			e.closeLog()
		}
	}()
	o.drain(ctx, e, rsb, req)
	o.watchOOM(ctx, e)
	e.envd = o.envdClient(sb.ID)
	switch {
	case sb.State == store.StateRunning && state == runtime.StatePaused:
		err = o.cfg.Runtime.Thaw(ctx, sb.ID)
	case sb.State == store.StatePaused && state == runtime.StateRunning:
		err = o.cfg.Runtime.Freeze(ctx, sb.ID)
	}
	if err != nil {
		return fmt.Errorf("the server restarted and could not bring it back to %s: %w", sb.State, err)
	}
	if sb.State == store.StateRunning {
		if err := waitHealthy(ctx, e.envd, adoptHealthWait); err != nil {
			return fmt.Errorf("the server restarted and its envd did not answer: %w", err)
		}
	}
	// Once live, the sandbox is the evictor's too (an overdue one is killed at once): what
	// the log line says of it is read before.
	adopted := []any{telemetry.KeyState, string(sb.State), telemetry.KeyRuntimeState, state.String(), telemetry.KeyPID, rsb.Pid,
		telemetry.KeyEndAt, sb.EndAt.UTC()}
	o.mu.Lock()
	o.live[sb.ID] = e
	o.mu.Unlock()
	o.watchInit(e)
	o.nudge()
	o.logger(ctx).Info("sandbox adopted", append(adopted, telemetry.KeyDurationMS, float64(time.Since(begun).Microseconds())/1000)...)
	return nil
}

// adoptSnapshot takes over a sandbox paused as a snapshot: nothing runs, so there is nothing
// to watch until a resume restores it. A record that says running (the server died between
// the snapshot and its record) wins: the sandbox is restored now.
func (o *Orchestrator) adoptSnapshot(ctx context.Context, e *entry, req CreateRequest, begun time.Time) error {
	sb := e.sb
	e.onDisk = true
	if len(req.Secrets) > 0 {
		e.redactor = o.sandboxRedactor(sb, req) // the restore's collector masks them
	}
	if sb.State == store.StateRunning {
		e.mu.Lock()
		_, err := o.restore(ctx, e)
		e.mu.Unlock()
		if err != nil {
			e.stopWatching()
			for _, p := range e.pipes {
				_ = p.Close()
			}
			e.closeLog()
			return fmt.Errorf("the server restarted and could not restore its snapshot: %w", err)
		}
	}
	adopted := []any{telemetry.KeyState, string(sb.State), telemetry.KeyRuntimeState, runtime.StateCheckpointed.String(), telemetry.KeyEndAt, sb.EndAt.UTC()}
	o.mu.Lock()
	o.live[sb.ID] = e
	o.mu.Unlock()
	o.nudge()
	o.logger(ctx).Info("sandbox adopted", append(adopted, telemetry.KeyDurationMS, float64(time.Since(begun).Microseconds())/1000)...)
	return nil
}

// Detach stops the evictor and lets go of every sandbox without killing it: their processes
// run on (frozen ones stay frozen), their output waits in their FIFOs, and the next server on
// the data dir adopts them (Recover). Proxied connections are cut; clients retry.
func (o *Orchestrator) Detach(ctx context.Context) {
	o.closed.Do(func() { close(o.stop) })
	ctx = telemetry.WithRequestID(telemetry.WithLogger(ctx, o.cfg.Logger), SystemRequestID)
	o.closePools(ctx) // a pool is rebuilt by the next server, never adopted
	n := 0
	for _, e := range o.entries() {
		e.mu.Lock()
		if !e.killed {
			e.detached = true
			e.closeAll()
			e.stopWatching()
			for _, p := range e.pipes {
				_ = p.Close()
			}
			e.closeLog()
			n++
		}
		e.mu.Unlock()
	}
	o.logger(ctx).Info("server let go of its sandboxes; the next start adopts them", telemetry.KeySandboxes, n)
	o.releaseVolumes(ctx)
}
