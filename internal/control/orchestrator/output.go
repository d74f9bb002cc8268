package orchestrator

import (
	"context"
	"io"
	"os"
	"path/filepath"

	"github.com/cove-dev/cove/internal/observe/collect"
	"github.com/cove-dev/cove/internal/sandbox/runtime"
	"github.com/cove-dev/cove/internal/store"
)

// This file: a sandbox\'s pipes read into the collector and its envd log file.

// drain collects the sandbox's stdout (output lines and command records) and stderr (envd's
// log lines, also kept in its log file, which outlives the sandbox for post-mortems) into
// the stores, labelled and redacted. A sandbox whose pipes nobody read would block.
//
// After a restore the sandbox has new pipes: drain reads them with the collector it had, so
// its secrets and the commands it knows run on.
func (o *Orchestrator) drain(ctx context.Context, e *entry, rsb *runtime.Sandbox, req CreateRequest) {
	var raw io.Writer
	if e.logFile == nil && o.cfg.LogDir != "" {
		if f, err := os.OpenFile(filepath.Join(o.cfg.LogDir, rsb.ID+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); err == nil {
			e.logFile = f
		}
	}
	if e.logFile != nil {
		raw = e.logFile
	}
	if e.collector != nil {
		o.pump(ctx, e, rsb, raw)
		return
	}
	if e.redactor == nil {
		// An adopted sandbox: its creating request's secrets are the ones kept for it.
		e.redactor = o.keptRedactor(ctx, e.sb, e.sb.ID)
		if err := o.keepSecrets(ctx, e); err != nil {
			o.logger(ctx).Error("the adopted sandbox's secrets are masked but not kept", "error", err.Error())
		}
	}
	e.collector = collect.New(collect.Labels{SandboxID: e.sb.ID, TeamID: e.sb.TeamID, TemplateID: e.sb.TemplateID},
		e.redactor, o.cfg.Logs, o.cfg.Commands, o.logger(ctx))
	e.collector.OnOOM = o.guestOOM(e.sb.ID, o.logger(ctx))
	o.pump(ctx, e, rsb, raw)
}

// pump reads rsb's pipes into e's collector until they end.
func (o *Orchestrator) pump(ctx context.Context, e *entry, rsb *runtime.Sandbox, raw io.Writer) {
	e.pipes = []io.Closer{rsb.Stdout, rsb.Stderr}
	e.drainers.Add(2)
	// The pipes outlive the create request: its values go on, its cancel does not.
	collectCtx := context.WithoutCancel(ctx)
	go func() {
		defer e.drainers.Done()
		e.collector.Stdout(collectCtx, rsb.Stdout)
		_ = rsb.Stdout.Close()
	}()
	go func() {
		defer e.drainers.Done()
		e.collector.Stderr(rsb.Stderr, raw)
		_ = rsb.Stderr.Close()
	}()
}

// collectOutput says whether sb's envd collects command output: the sandbox's own
// collectLogs, else its template's (cove template set), else its team's or template's in
// --collect-budgets; nil leaves envd's default, on.
func (o *Orchestrator) collectOutput(sb *store.Sandbox, own, template *bool) *bool {
	if own != nil {
		return own
	}
	if template != nil {
		return template
	}
	return o.cfg.CollectBudgets.For(o.cfg.Collect, sb.TeamID, sb.TemplateID).Collect
}

func (e *entry) closeLog() {
	if e.logFile != nil {
		go func(f *os.File) { e.drainers.Wait(); _ = f.Close() }(e.logFile)
	}
}
