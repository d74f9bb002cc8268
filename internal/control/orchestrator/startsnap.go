package orchestrator

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/cove-dev/cove/internal/builder/template"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/sandbox/runtime"
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
	sb := o.newRecord(ctx, t, 0)
	sb.TeamID = t.TeamID
	log(fmt.Sprintf("    build sandbox %s", sb.ID))
	p := &plan{kind: launchBuild, sb: sb, tmpl: t, req: CreateRequest{AllowInternet: true}, begun: time.Now(),
		startLog: func(line string) { log("    start: " + line) }}
	e, _, err := o.launch(ctx, p)
	ctx = sandboxLog(ctx, sb)
	if err != nil {
		err = fmt.Errorf("build sandbox: %w", err)
		o.logger(ctx).Error("template start snapshot failed", telemetry.KeyError, err.Error())
		return nil, err
	}
	defer o.discard(ctx, e, false)
	defer func() {
		if err != nil {
			o.logger(ctx).Error("template start snapshot failed", telemetry.KeyError, err.Error())
		}
	}()
	ready := p.ready
	log(fmt.Sprintf("    ready check passed in %d ms", ready.Milliseconds()))
	e.envd.CloseIdleConnections()
	begun := time.Now()
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
