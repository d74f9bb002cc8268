package orchestrator

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/cove-dev/cove/internal/runtime"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/telemetry"
	"github.com/cove-dev/cove/internal/template"
	"github.com/cove-dev/cove/sdk/envdapi"
)

// This file: templates' start snapshots. At the end of a build the start command runs once
// in a build sandbox and, once its ready check passes, the sandbox is checkpointed into the
// template (SnapshotStart); a create from the template restores that checkpoint instead of
// running the command again and waiting for the check (startFrom).

var _ template.StartSnapshotter = (*Orchestrator)(nil)

// SnapshotStart implements template.StartSnapshotter. The build sandbox has the template's
// size (counted against the team's quotas), a network as sandboxes have (with internet
// access, as build steps have), no access token (each sandbox restored from the snapshot
// gets its own at create) and no record: a crash mid-build leaves a runtime sandbox that
// Recover destroys.
func (o *Orchestrator) SnapshotStart(ctx context.Context, t *template.Template, dir string, log func(string)) (_ *template.StartSnapshot, err error) {
	ck, ok := o.cfg.Runtime.(runtime.Checkpointer)
	if !ok {
		return nil, fmt.Errorf("%w: this runtime cannot checkpoint sandboxes", template.ErrNoStartSnapshot)
	}
	if err := ck.CanCheckpoint(); err != nil {
		return nil, fmt.Errorf("%w: %v", template.ErrNoStartSnapshot, err)
	}
	sb := &store.Sandbox{Node: o.cfg.Node, Runtime: o.engineFor(t), ID: newID(), TeamID: t.TeamID, TemplateID: t.Name, State: store.StateRunning,
		CPUCount: orDefault(t.CPUCount, o.cfg.CPUCount), MemoryMB: orDefault(t.MemoryMB, o.cfg.MemoryMB)}
	ctx = sandboxLog(ctx, sb)
	// The build sandbox counts against its team's quotas while it runs, as a sandbox does.
	o.mu.Lock()
	err = o.admit(sb.ID, sb.TeamID, sb.CPUCount, sb.MemoryMB, time.Now())
	o.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("build sandbox: %w", err)
	}
	defer func() {
		o.mu.Lock()
		delete(o.creating, sb.ID)
		o.mu.Unlock()
	}()
	spec := runtime.Spec{
		Engine: runtime.Engine(sb.Runtime),
		ID:     sb.ID, Rootfs: t.Rootfs, Layers: t.LayerDirs, Args: o.envdCommand(sb), Env: []string{"COVE_SANDBOX_ID=" + sb.ID},
		Limits: runtime.Limits{MemoryBytes: int64(sb.MemoryMB) << 20, CPUs: float64(sb.CPUCount), PIDs: o.cfg.PIDs, DiskBytes: int64(o.cfg.DiskSizeMB) << 20},
		Binds:  []runtime.Bind{{Source: o.cfg.CoveBinary, Target: "/.cove/cove", ReadOnly: true}},
		Start:  true,
	}
	defer func() {
		_ = o.cfg.Runtime.Destroy(context.WithoutCancel(ctx), sb.ID)
		o.detachNetwork(ctx, sb.ID)
		if err != nil {
			o.logger(ctx).Error("template start snapshot failed", telemetry.KeyError, err.Error())
		}
	}()
	if ctx, err = o.attachNetwork(ctx, sb, CreateRequest{AllowInternet: true}, &spec); err != nil {
		return nil, fmt.Errorf("build sandbox network: %w", err)
	}
	log(fmt.Sprintf("    build sandbox %s", sb.ID))
	rsb, err := o.cfg.Runtime.Create(ctx, spec)
	if err != nil {
		return nil, fmt.Errorf("build sandbox: %w", err)
	}
	for _, r := range []io.ReadCloser{rsb.Stdout, rsb.Stderr} {
		go func() { _, _ = io.Copy(io.Discard, r); _ = r.Close() }() // envd's records: no sandbox to file them under
	}
	c := o.envdClient(sb.ID)
	defer c.CloseIdleConnections()
	if err := waitHealthy(ctx, c, 10*time.Second); err != nil {
		return nil, fmt.Errorf("envd in the build sandbox did not come up: %w", err)
	}
	init := templateInit(t, nil)
	if err := postInit(ctx, c, init); err != nil {
		return nil, fmt.Errorf("init envd in the build sandbox: %w", err)
	}
	begun := time.Now()
	startOut := func(line string) { log("    start: " + line) }
	if err := startTemplateCmdLogged(ctx, c, "", deref(init.DefaultUser), deref(init.DefaultWorkdir), t.StartCmd, t.ReadyCmd, startOut); err != nil {
		return nil, err
	}
	ready := time.Since(begun)
	log(fmt.Sprintf("    ready check passed in %d ms", ready.Milliseconds()))
	c.CloseIdleConnections()
	begun = time.Now()
	if _, err := ck.Checkpoint(ctx, sb.ID); err != nil {
		return nil, fmt.Errorf("checkpoint the build sandbox: %w", err)
	}
	n, err := ck.Export(ctx, sb.ID, dir)
	if err != nil {
		return nil, fmt.Errorf("export the build sandbox's checkpoint: %w", err)
	}
	took := time.Since(begun)
	o.logger(ctx).Info("template start snapshot taken", telemetry.KeyDurationMS, took.Milliseconds())
	return &template.StartSnapshot{Bytes: n, ReadyMS: ready.Milliseconds(), SnapshotMS: took.Milliseconds(),
		Network: o.cfg.Network != nil, CreatedAt: time.Now().UTC(), Dir: dir}, nil
}

// startSnapshot is the start snapshot a create from tmpl restores, or nil (and why not) when
// it runs the start command instead: the template has none, checkpoints are unavailable
// here, the snapshot was taken with another network setup, or the create mounts volumes
// (the snapshot's mounts would not match).
func (o *Orchestrator) startSnapshot(tmpl *template.Template, req CreateRequest) (*template.StartSnapshot, string) {
	sn := tmpl.StartSnapshot
	switch {
	case sn == nil:
		return nil, ""
	case len(req.VolumeMounts) > 0:
		return nil, "the create mounts volumes"
	case sn.Network != (o.cfg.Network != nil):
		return nil, "the snapshot was taken on a server with another network setup"
	}
	if _, err := o.checkpointer(); err != nil {
		return nil, err.Error()
	}
	if _, err := os.Stat(filepath.Join(sn.Dir, "checkpoint")); sn.Dir == "" || err != nil {
		return nil, "its files went with the build it was taken in (a tag of an earlier build)"
	}
	return sn, ""
}

// templateInit is what envd of a sandbox of tmpl is told at start: the template's
// environment under envVars, its user (the base's account unless a step set one) and workdir.
func templateInit(tmpl *template.Template, envVars map[string]string) envdapi.Init {
	init := envdapi.Init{EnvVars: withTemplateEnv(tmpl.Env, envVars)}
	if hasUser(tmpl.Rootfs, template.UserName) {
		user, home := template.UserName, template.UserHome
		init.DefaultUser, init.DefaultWorkdir = &user, &home
	}
	if tmpl.User != "" {
		init.DefaultUser = &tmpl.User
	}
	if tmpl.Workdir != "" {
		init.DefaultWorkdir = &tmpl.Workdir
	}
	return init
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
