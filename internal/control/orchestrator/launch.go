package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/cove-dev/cove/internal/builder/template"
	"github.com/cove-dev/cove/internal/control/snapshot"
	"github.com/cove-dev/cove/internal/observe/events"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/sandbox/egress"
	"github.com/cove-dev/cove/internal/sandbox/network"
	"github.com/cove-dev/cove/internal/sandbox/runtime"
	"github.com/cove-dev/cove/internal/store"
	cove "github.com/cove-dev/cove/sdk"
	"github.com/cove-dev/cove/sdk/reason"
)

// This file: the one launch pipeline. Every way a sandbox starts is a plan that launch runs
// through the same steps, in this order:
//
//  1. reserve   the team's quota and create rate and, in a cluster, the node's room
//  2. identity  its inbound settings, its redactor (its own secrets and its origin's), sealed
//  3. rootfs    the template's layers, cove as envd, volumes; a checkpoint to restore, or a boot
//  4. network   its namespace and egress rules (a pooled sandbox's are updated in place)
//  5. runtime   create and start, or restore; its output collected, its OOM kills watched
//  6. envd      health; /init (environment, token, collection); the template's start command
//  7. record    its record (a moved sandbox's names this node from then on)
//  8. register  the created (or resumed) event, then live, watched, timed; killed at once
//     if the server began to stop meanwhile
//  9. log       the counters and the log line
//
// The kinds differ in data (where the sandbox comes from, which steps apply: launchKind's
// methods) and a few small hooks, never in a copy of the sequence: what one kind gains (the
// shutdown-race kill, say) every kind has.

// launchKind is one way a sandbox starts. The set is closed.
type launchKind string

const (
	// launchCreate: a template's sandbox, booted, or restored from its start snapshot.
	launchCreate launchKind = "create"
	// launchClaim: a create a warm pool serves: the pool's running sandbox becomes the caller's.
	launchClaim launchKind = "claim"
	// launchCopy: a fork's copy or a named snapshot's start: a checkpoint restored as a new sandbox.
	launchCopy launchKind = "copy"
	// launchMove: a sandbox paused on another node restored here, under its own id (takeOver).
	launchMove launchKind = "move"
	// launchPool: a warm pool's sandbox: no team, record or events until a claim.
	launchPool launchKind = "pool"
	// launchBuild: a template build's sandbox for its start snapshot: its team's quota, no
	// record, destroyed once checkpointed (SnapshotStart).
	launchBuild launchKind = "build"
)

func (k launchKind) String() string {
	if k == "" {
		return "unknown"
	}
	return string(k)
}

// owned: the sandbox is a team's: its secrets are kept, it is recorded, told of, and live.
func (k launchKind) owned() bool { return k != launchPool && k != launchBuild }

// initsEnvd: envd is told the sandbox's environment at start; a restored checkpoint's envd
// keeps its origin's, and a pool's waits for its claim's.
func (k launchKind) initsEnvd() bool {
	return k == launchCreate || k == launchClaim || k == launchBuild
}

// runsStartCmd: the template's start command runs in it (unless a start snapshot restored
// it running). A pool's never does: its environment would not be the claimer's.
func (k launchKind) runsStartCmd() bool { return k == launchCreate || k == launchBuild }

// plan is one start: the sandbox to be and where it comes from. The constructors (Create,
// createFrom, claim, bootPooled, SnapshotStart) fill it; launch runs it.
type plan struct {
	kind launchKind
	// sb is the sandbox to be: id, team, sizes, engine, TTL, token. launch fills in what its
	// steps learn (internet access, redacted metadata).
	sb      *store.Sandbox
	tmpl    *template.Template // the template under it
	req     CreateRequest      // its environment, network, inbound settings, secrets, collection, volumes
	timeout time.Duration
	begun   time.Time

	// checkpoint is the exported checkpoint a copy or a moved sandbox restores.
	checkpoint string
	// snap is the template's start snapshot a create or a pool boot restores, its start
	// command running and ready.
	snap *template.StartSnapshot
	// originVolumes: req.VolumeMounts are the origin's (a copy's processes hold files on
	// them), not the caller's.
	originVolumes bool
	// kept names the kept secrets a copy is masked of: its fork parent's or its snapshot's.
	kept []string
	// pooled is the running sandbox a claim makes the caller's.
	pooled *poolEntry
	// forkedFrom and snapshotID say where a copy came from; moved is the record of a moved
	// sandbox as the node that paused it left it.
	forkedFrom, snapshotID string
	moved                  *store.Sandbox
	// startLog, for a build, gets the start command's output; launch sets ready to the time
	// the start command took to pass its ready check.
	startLog func(string)
	ready    time.Duration
}

// launch runs p's steps (this file's comment). It returns the started sandbox's entry and,
// for an owned kind, a copy of its record taken before it went live.
func (o *Orchestrator) launch(ctx context.Context, p *plan) (_ *entry, _ *store.Sandbox, err error) {
	sb, k := p.sb, p.kind
	var e *entry // the failure cleanup's: the results are nil by then
	ctx = sandboxLog(ctx, sb)
	var laps []any // a claim's log line says how long each step took
	lapped := time.Now()
	lap := func(key string) {
		if k == launchClaim {
			laps = append(laps, key, float64(time.Since(lapped).Microseconds())/1000)
			lapped = time.Now()
		}
	}

	// 1. reserve
	release, err := o.charge(ctx, p)
	if err != nil {
		return nil, nil, err
	}
	defer release() // registered live by now, or failed
	lap(telemetry.KeyClaimQuotaMS)

	// 2. identity
	if p.pooled != nil {
		e = p.pooled.e
		e.sb = sb
	} else {
		e = &entry{sb: sb, closers: map[*closer]struct{}{}, moved: p.moved != nil}
	}
	stage := "identity"
	kept, made := false, false // its secrets are sealed; it has a network or runtime sandbox to undo
	defer func() {
		if err == nil {
			return
		}
		if k.owned() && k != launchClaim {
			telemetry.SandboxCreateFailures.WithLabelValues(stage).Inc()
			o.logger(ctx).Error("sandbox create failed", telemetry.KeyLaunch, k.String(), telemetry.KeyStage, stage, telemetry.KeyError, err.Error())
		}
		switch {
		case p.pooled != nil: // a claim's pooled sandbox is claimPooled's to destroy
		case made:
			o.discard(ctx, e, kept)
		case kept:
			o.dropSecrets(ctx, e)
		}
	}()
	p.req = withPorts(e, p.req)
	if p.pooled != nil {
		for _, s := range sandboxSecrets(sb, p.req) {
			e.redactor.AddSecret(s)
		}
	} else {
		e.redactor = o.sandboxRedactor(sb, p.req)
		o.addKept(ctx, e.redactor, p.kept...)
	}
	sb.Metadata = redactMetadata(e.redactor, sb.Metadata)
	if k.owned() {
		if err = o.keepSecrets(ctx, e); err != nil {
			stage = "secrets"
			return nil, nil, err
		}
		kept = true
	}
	lap(telemetry.KeyClaimSecretsMS)

	if p.pooled == nil {
		// 3. rootfs
		stage = "rootfs"
		spec := runtime.Spec{
			Engine: runtime.Engine(sb.Runtime),
			ID:     sb.ID, Rootfs: p.tmpl.Rootfs, Layers: p.tmpl.LayerDirs, Args: o.envdCommand(sb), Env: []string{"COVE_SANDBOX_ID=" + sb.ID},
			Limits: runtime.Limits{MemoryBytes: int64(sb.MemoryMB) << 20, CPUs: float64(sb.CPUCount), PIDs: o.cfg.PIDs, DiskBytes: int64(sb.DiskSizeMB) << 20},
			Binds:  []runtime.Bind{{Source: o.cfg.CoveBinary, Target: "/.cove/cove", ReadOnly: true}},
			Start:  true,
		}
		switch {
		case p.checkpoint != "":
			spec.Start, spec.Restore = false, p.checkpoint
		case p.snap != nil:
			spec.Start, spec.Restore = false, p.snap.Dir
		}
		vb, vids, verr := o.volumeBinds(ctx, sb.TeamID, sb.ID, p.req.VolumeMounts)
		switch {
		case p.originVolumes && errors.Is(verr, snapshot.ErrVolumeNotFound):
			// Not the caller's mounts: the origin's, one of them deleted since.
			return nil, nil, fmt.Errorf("%w: a volume its processes used was deleted (%v)", ErrConflict, verr)
		case verr != nil:
			return nil, nil, verr
		}
		spec.Binds, e.volumes = append(spec.Binds, vb...), vids

		// 4. network
		stage, made = "network", true
		if ctx, err = o.attachNetwork(ctx, sb, p.req, &spec); err != nil {
			return nil, nil, fmt.Errorf("create sandbox: %w", err)
		}

		// 5. runtime
		stage = "runtime"
		if err = o.start(ctx, p, e, spec); err != nil {
			return nil, nil, err
		}

		// 6. envd
		stage = "envd"
		e.envd = o.envdClient(sb.ID)
		if err = waitHealthy(ctx, e.envd, 10*time.Second); err != nil {
			return nil, nil, fmt.Errorf("envd in sandbox %s did not come up: %w", sb.ID, err)
		}
	} else {
		// 4. network: the pool's sandbox runs, under the rules of most creates; the caller's
		// replace them in place.
		stage = "network"
		if err = o.claimNetwork(ctx, sb, p.req); err != nil {
			return nil, nil, err
		}
		lap(telemetry.KeyClaimNetworkMS)
		e.collector.Claim(sb.TeamID)
	}
	stage = "envd"
	if k.initsEnvd() {
		init := templateInit(p.tmpl, p.req.EnvVars)
		if k.owned() {
			init.CollectOutput = o.collectOutput(sb, p.req.CollectLogs, p.tmpl.CollectLogs)
		}
		if sb.EnvdAccessToken != "" {
			init.AccessToken = &sb.EnvdAccessToken
		}
		if err = postInit(ctx, e.envd, init); err != nil {
			return nil, nil, fmt.Errorf("init envd in sandbox %s: %w", sb.ID, err)
		}
		lap(telemetry.KeyClaimInitMS)
		if k.runsStartCmd() && p.snap == nil && (p.tmpl.StartCmd != "" || p.tmpl.ReadyCmd != "") {
			stage = "start_cmd"
			began := time.Now()
			if err = startTemplateCmdLogged(ctx, e.envd, sb.EnvdAccessToken, deref(init.DefaultUser), deref(init.DefaultWorkdir),
				p.tmpl.StartCmd, p.tmpl.ReadyCmd, p.startLog); err != nil {
				return nil, nil, fmt.Errorf("template %s in sandbox %s: %w", p.tmpl.Name, sb.ID, err)
			}
			p.ready = time.Since(began)
		}
	}
	if p.snap != nil && k.owned() && p.pooled == nil {
		o.logger(ctx).Info("sandbox restored from its template's start snapshot: the start command runs, ready", telemetry.KeyDurationMS, time.Since(p.begun).Milliseconds())
	}
	if !k.owned() {
		return e, nil, nil
	}

	// 7. record
	stage = "store"
	record := o.cfg.Store.InsertSandbox
	if p.moved != nil {
		record = o.cfg.Store.UpdateSandbox // its record exists: it names this node now
	}
	if err = record(ctx, sb); err != nil {
		return nil, nil, fmt.Errorf("record sandbox: %w", err)
	}
	lap(telemetry.KeyClaimStoreMS)

	// 8. register. Told before the sandbox is published: from then on the evictor or a kill
	// may change it (sb is e.sb, guarded by e.mu), and its created event must come before its
	// killed one.
	out := copySandbox(sb)
	took := time.Since(p.begun)
	if p.moved != nil {
		o.emit(ctx, events.SandboxResumed, out, &cove.ResumedEventData{EndAt: out.EndAt.UTC(), TimeoutSeconds: p.timeout.Seconds(),
			Kind: reason.PauseSnapshot.String(), DurationMS: took.Milliseconds()})
	} else {
		created := &cove.CreatedEventData{TimeoutSeconds: p.timeout.Seconds(), Secure: out.Secure, AutoPause: out.AutoPause,
			ForkedFrom: p.forkedFrom, SnapshotID: p.snapshotID, DurationMS: took.Milliseconds()}
		if p.snap != nil {
			created.StartSnapshotBuild = p.snap.BuildID
		}
		if p.pooled != nil {
			created.Pooled, created.ClaimMS = true, float64(took.Microseconds())/1000
		}
		o.emit(ctx, events.SandboxCreated, out, created)
	}
	lap(telemetry.KeyClaimEventMS)
	telemetry.SandboxesLive.WithLabelValues(string(store.StateRunning)).Inc() // before a kill can count it out
	o.mu.Lock()
	o.live[sb.ID] = e
	delete(o.creating, sb.ID)
	stopping := o.stopping()
	o.mu.Unlock()
	o.watchInit(e)
	if p.pooled != nil {
		o.watchOOM(ctx, e) // not while it was pooled: its events would have had no team
	}
	if stopping {
		// Shutdown went through the live sandboxes before this one was among them.
		stage, made, kept = "shutdown", false, false // the kill tore it down
		_ = o.kill(o.systemContext(), e, reason.KillServerShutdown, "", "the server shut down while it was being "+k.startedAs())
		return nil, nil, fmt.Errorf("create sandbox: %w", o.goneOf(e))
	}
	o.nudge()

	// 9. log
	switch {
	case p.moved != nil:
		telemetry.RestoreSeconds.Observe(took.Seconds())
		o.logger(ctx).Info("sandbox resumed on another node than the one it was paused on", telemetry.KeyDurationMS, took.Milliseconds(),
			telemetry.KeyNodeOther, p.moved.Node)
		return e, out, nil
	case p.checkpoint != "":
		telemetry.RestoreSeconds.Observe(took.Seconds())
	default:
		telemetry.SandboxCreateSeconds.Observe(took.Seconds())
	}
	telemetry.SandboxesCreated.WithLabelValues(out.TemplateID).Inc()
	attrs := []any{telemetry.KeyDurationMS, took.Milliseconds(), telemetry.KeyTimeoutS, p.timeout.Seconds(), telemetry.KeySecure, out.Secure,
		telemetry.KeyAutoPause, out.AutoPause, telemetry.KeyEnvNames, out.EnvVarNames, telemetry.KeyAllowInternetAccess, out.AllowInternet}
	if p.forkedFrom != "" {
		attrs = append(attrs, telemetry.KeyForkedFrom, p.forkedFrom)
	}
	if p.snapshotID != "" {
		attrs = append(attrs, telemetry.KeySnapshotID, p.snapshotID)
	}
	if p.pooled != nil {
		attrs = append(append(attrs, telemetry.KeyPooled, true, telemetry.KeyPooledForMS, out.StartedAt.Sub(p.pooled.since).Milliseconds()), laps...)
	}
	o.logger(ctx).Info("sandbox created", attrs...)
	return e, out, nil
}

// startedAs is what a shutdown that overtook a start says the sandbox was being.
func (k launchKind) startedAs() string {
	if k == launchMove {
		return "moved here"
	}
	return "created"
}

// charge is the reserve step: a team's sandbox reserves its quota and its node's room (as
// reserve); a build's sandbox counts against its team's quota only; a pool's against nothing
// (it is no team's: its claim reserves).
func (o *Orchestrator) charge(ctx context.Context, p *plan) (release func(), err error) {
	switch p.kind {
	case launchPool:
		return func() {}, nil
	case launchBuild:
		o.mu.Lock()
		err = o.admit(p.sb.ID, p.sb.TeamID, p.sb.CPUCount, p.sb.MemoryMB, time.Now())
		o.mu.Unlock()
		if err != nil {
			return nil, err
		}
		return func() {
			o.mu.Lock()
			delete(o.creating, p.sb.ID)
			o.mu.Unlock()
		}, nil
	}
	return o.reserve(ctx, p.sb, time.Now())
}

// start is the runtime step: the runtime creates the sandbox (restoring p's checkpoint or
// start snapshot, else booting it) and its output is collected. A start snapshot that does
// not restore falls back to a boot, whose start command then runs.
func (o *Orchestrator) start(ctx context.Context, p *plan, e *entry, spec runtime.Spec) error {
	rsb, err := o.cfg.Runtime.Create(ctx, spec)
	if err != nil && p.snap != nil && p.kind.runsStartCmd() {
		o.logger(ctx).Warn("restore from the template's start snapshot failed: the start command runs at create", telemetry.KeyError, err.Error())
		p.snap, spec.Start, spec.Restore = nil, true, ""
		rsb, err = o.cfg.Runtime.Create(ctx, spec)
	}
	if errors.Is(err, runtime.ErrBindTarget) { // a volume mounted over a file of the template
		return fmt.Errorf("%w: volumeMounts: %v", ErrInvalid, err)
	}
	if err != nil {
		return fmt.Errorf("create sandbox: %w", err)
	}
	if p.kind == launchBuild {
		for _, r := range []io.ReadCloser{rsb.Stdout, rsb.Stderr} {
			go func() { _, _ = io.Copy(io.Discard, r); _ = r.Close() }() // envd's records: no sandbox to file them under
		}
		return nil
	}
	o.drain(ctx, e, rsb, p.req)
	if p.kind != launchPool {
		o.watchOOM(ctx, e) // a pool's from its claim: its events need a team
	}
	return nil
}

// claimNetwork gives a claimed pooled sandbox the caller's egress rules and inbound settings.
func (o *Orchestrator) claimNetwork(ctx context.Context, sb *store.Sandbox, req CreateRequest) error {
	if o.cfg.Network == nil {
		return nil
	}
	p := egress.Policy{}
	if req.Network != nil {
		p = *req.Network
	}
	p.AllowInternet, p.Team = req.AllowInternet, sb.TeamID
	if err := o.cfg.Network.Update(ctx, sb.ID, p); err != nil {
		return fmt.Errorf("network: %w", err)
	}
	if in := (network.Inbound{TrafficToken: req.trafficToken, MaskRequestHost: req.MaskRequestHost, HTTPSPorts: req.HTTPSPorts}); in.TrafficToken != "" || in.MaskRequestHost != "" || len(in.HTTPSPorts) > 0 {
		if err := o.cfg.Network.SetInbound(sb.ID, in); err != nil {
			return fmt.Errorf("network: %w", err)
		}
	}
	sb.AllowInternet = p.AllowInternet
	return nil
}

// discard removes what a start made of a sandbox that did not go live (or a pool's, or a
// build's, once done with): its processes, network, kept secrets (when kept), watches and log.
func (o *Orchestrator) discard(ctx context.Context, e *entry, kept bool) {
	_ = o.cfg.Runtime.Destroy(context.WithoutCancel(ctx), e.sb.ID)
	o.detachNetwork(ctx, e.sb.ID)
	if kept {
		o.dropSecrets(ctx, e)
	}
	e.stopWatching()
	e.closeLog()
}
