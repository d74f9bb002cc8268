package orchestrator

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/cove-dev/cove/internal/observe/events"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/sdk/envdapi"
	"github.com/cove-dev/cove/sdk/reason"
)

// This file: what the kernel says about a sandbox: its init exiting and its OOM kills.

// watchInit kills the sandbox, with the reason, if its envd exits on its own or is OOM-killed.
func (o *Orchestrator) watchInit(e *entry) {
	id, boot := e.sb.ID, e.boots
	o.wg.Add(1)
	go func() {
		defer o.wg.Done()
		ex, err := o.cfg.Runtime.Wait(context.Background(), id)
		if err != nil {
			return
		}
		e.mu.Lock()
		detached, stopped := e.detached, e.boots != boot || e.sb.PauseKind == reason.PauseFilesystem
		e.mu.Unlock()
		if detached || ex.Checkpointed || stopped {
			return // let go of, or on disk: a restore or reboot watches the new init
		}
		why := reason.KillEnvdExited
		if ex.OOMKilled {
			why = reason.KillOOM
		}
		ctx := o.systemContext()
		if err := o.kill(ctx, e, why, "", fmt.Sprintf("envd exited: code %d signal %q", ex.Code, ex.Signal)); err == nil {
			o.logger(ctx).Warn("sandbox init exited", telemetry.KeySandboxID, id, telemetry.KeySandboxExitCode, ex.Code, telemetry.KeySandboxSignal, ex.Signal, telemetry.KeyOOMKilled, ex.OOMKilled)
		}
	}()
}

// watchOOM logs every OOM kill inside the sandbox. envd raises its children's OOM score, so
// the kernel kills the runaway command and the sandbox lives on; if envd itself dies of it,
// watchInit kills the sandbox with reason oom.
func (o *Orchestrator) watchOOM(ctx context.Context, e *entry) {
	id := e.sb.ID
	logger := o.logger(ctx)
	watch, stop := context.WithCancel(context.Background())
	e.stopOOM = stop
	oom, err := o.cfg.Runtime.OOMEvents(watch, id)
	if err != nil {
		logger.Warn("oom events unavailable", telemetry.KeyError, err.Error())
		return
	}
	go func() {
		for n := range oom {
			attrs := []any{telemetry.KeyOOMKills, n}
			if st, err := o.cfg.Runtime.Stats(context.Background(), id); err == nil {
				attrs = append(attrs, telemetry.KeyMemoryLimitBytes, st.MemoryLimit, telemetry.KeyMemoryMaxUsageBytes, st.MemoryMaxUsage)
			}
			o.oomKilled(logger, id, n, attrs)
		}
	}()
}

// oomKilled logs an OOM kill in sandbox id and emits its event with the count n so far:
// the kernel's (watchOOM) or, where the kernel under envd has no OOM killer for the sandbox
// (gVisor's), envd's (its record, through the collector: guestOOM).
func (o *Orchestrator) oomKilled(logger *slog.Logger, id string, n uint64, attrs []any) {
	logger.Warn("sandbox oom kill", attrs...)
	o.mu.Lock()
	e := o.live[id]
	o.mu.Unlock()
	if e == nil {
		return
	}
	e.mu.Lock()
	sb := copySandbox(e.sb)
	e.mu.Unlock()
	o.emit(o.systemContext(), events.SandboxOOM, sb, events.OOMData(int(n)))
}

// guestOOM hears envd's OOM kills in sandbox id (collect.Collector.OnOOM).
func (o *Orchestrator) guestOOM(id string, logger *slog.Logger) func(context.Context, envdapi.OOMKill) {
	return func(_ context.Context, k envdapi.OOMKill) {
		o.oomKilled(logger, id, k.Kills, []any{telemetry.KeyOOMKills, k.Kills, telemetry.KeyPID, k.PID,
			telemetry.KeyProcessCommand, k.Comm, telemetry.KeyMemoryLimitBytes, k.LimitBytes, telemetry.KeyBytes, k.RSSBytes})
	}
}
