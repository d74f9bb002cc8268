package orchestrator

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"time"

	"github.com/cove-dev/cove/internal/events"
	"github.com/cove-dev/cove/internal/network"
	"github.com/cove-dev/cove/internal/redact"
	"github.com/cove-dev/cove/internal/runtime"
	"github.com/cove-dev/cove/internal/snapshot"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/telemetry"
	"github.com/cove-dev/cove/internal/template"
	cove "github.com/cove-dev/cove/sdk"
	"github.com/cove-dev/cove/sdk/reason"
)

// This file: the sandbox create path: a request, its checks and its record.

// CreateRequest is what a client asks for when it creates a sandbox.
type CreateRequest struct {
	TeamID, TemplateID, APIKeyID string
	Timeout                      time.Duration // 0 means the default, 300 s
	Metadata, EnvVars            map[string]string
	Secure, AutoPause            bool
	AutoResume, AllowInternet    bool
	// Network holds the allowOut and denyOut rules (AllowInternet above is the flag).
	Network *network.Policy
	// PrivateTraffic keeps the sandbox's ports private (E2B's allowPublicTraffic false): the
	// proxy requires its traffic access token.
	PrivateTraffic bool
	// MaskRequestHost and HTTPSPorts say how the proxy reaches the sandbox's ports.
	MaskRequestHost string
	HTTPSPorts      []int
	// trafficToken is what withPorts made for PrivateTraffic, recorded with the network.
	trafficToken string
	// Secrets are values to mask in everything collected from the sandbox (the caller's API
	// key); env var values whose names look secret are added too.
	Secrets []string
	// CollectLogs switches the collection of command output lines (default on).
	CollectLogs *bool
	// VolumeMounts mounts the team's volumes into the sandbox, read-write or read-only.
	VolumeMounts []VolumeMount
	// AutoPauseKind is how the TTL's auto-pause pauses (reason.PauseFilesystem: E2B's
	// autoPauseMemory false); the server's default when "".
	AutoPauseKind reason.PauseKind
}

// Create starts a sandbox from a template and returns it once envd answers.
func (o *Orchestrator) Create(ctx context.Context, req CreateRequest) (_ *store.Sandbox, err error) {
	begun := time.Now()
	if req.TemplateID == "" {
		req.TemplateID = "base"
	}
	if snapshot.IsID(req.TemplateID) {
		return o.createFromSnapshot(ctx, req)
	}
	timeout, err := o.clampTimeout(req.Timeout)
	if err != nil {
		return nil, err
	}
	tmpl, err := o.cfg.Templates.Get(req.TemplateID)
	if err == nil && !tmpl.VisibleTo(req.TeamID) {
		err = fmt.Errorf("template %s is another team's: %w", req.TemplateID, template.ErrNotFound) // as E2B: not found
	}
	if err != nil {
		telemetry.SandboxCreateFailures.WithLabelValues("template").Inc()
		if errors.Is(err, template.ErrNotFound) {
			return nil, fmt.Errorf("%w: %q (build it with `cove template build %s`)", ErrTemplateNotFound, req.TemplateID, req.TemplateID)
		}
		return nil, fmt.Errorf("template %q: %w", req.TemplateID, err)
	}
	if out, ok, err := o.claimPooled(ctx, req, tmpl, timeout, begun); ok {
		return out, err
	}
	now := time.Now()
	sb := &store.Sandbox{Node: o.cfg.Node,
		ID: newID(), TeamID: req.TeamID, TemplateID: req.TemplateID, State: store.StateRunning,
		Metadata: req.Metadata, CPUCount: orDefault(tmpl.CPUCount, o.cfg.CPUCount), MemoryMB: orDefault(tmpl.MemoryMB, o.cfg.MemoryMB), DiskSizeMB: o.cfg.DiskSizeMB,
		EnvdVersion: EnvdVersion, Secure: req.Secure, AutoPause: req.AutoPause, AutoResume: req.AutoResume,
		AllowInternet: false, StartedAt: now, EndAt: now.Add(timeout), CreatedBy: requestID(ctx), UpdatedAt: now,
		AutoPauseKind: req.AutoPauseKind,
	}
	sb.Runtime = o.engineFor(tmpl)
	if sb.Metadata == nil {
		sb.Metadata = map[string]string{}
	}
	for k := range req.EnvVars {
		sb.EnvVarNames = append(sb.EnvVarNames, k)
	}
	if req.Secure {
		sb.EnvdAccessToken = randomHex(16)
	}
	release, err := o.reserve(ctx, sb, now)
	if err != nil {
		return nil, err
	}
	defer release() // registered live by now, or failed
	e := &entry{sb: sb, closers: map[*closer]struct{}{}, redactor: o.sandboxRedactor(sb, req)}
	sb.Metadata = redactMetadata(e.redactor, sb.Metadata)
	ctx = sandboxLog(ctx, sb)
	if err := o.keepSecrets(ctx, e); err != nil {
		telemetry.SandboxCreateFailures.WithLabelValues("secrets").Inc()
		return nil, err
	}
	defer func() {
		if err != nil {
			o.dropSecrets(ctx, e)
		}
	}()
	binds := []runtime.Bind{{Source: o.cfg.CoveBinary, Target: "/.cove/cove", ReadOnly: true}}
	vb, vids, err := o.volumeBinds(req.TeamID, sb.ID, req.VolumeMounts)
	if err != nil {
		return nil, err
	}
	binds, e.volumes = append(binds, vb...), vids
	req = withPorts(e, req)

	stage := "runtime"
	defer func() {
		if err != nil {
			telemetry.SandboxCreateFailures.WithLabelValues(stage).Inc()
			_ = o.cfg.Runtime.Destroy(context.WithoutCancel(ctx), sb.ID)
			o.detachNetwork(ctx, sb.ID)
			e.stopWatching()
			e.closeLog()
			o.logger(ctx).Error("sandbox create failed", "stage", stage, "error", err.Error())
		}
	}()
	spec := runtime.Spec{
		Engine: runtime.Engine(sb.Runtime),
		ID:     sb.ID,
		Rootfs: tmpl.Rootfs,
		Layers: tmpl.LayerDirs,
		Args:   o.envdCommand(sb),
		Env:    []string{"COVE_SANDBOX_ID=" + sb.ID},
		Limits: runtime.Limits{MemoryBytes: int64(sb.MemoryMB) << 20, CPUs: float64(sb.CPUCount), PIDs: o.cfg.PIDs, DiskBytes: int64(o.cfg.DiskSizeMB) << 20},
		Binds:  binds,
		Start:  true,
	}
	// A template's start snapshot has its start command running and ready: restore it.
	snap, why := o.startSnapshot(tmpl, req)
	if why != "" {
		o.logger(ctx).Info("the template's start snapshot is not used (" + why + "): the start command runs at create")
	}
	if snap != nil {
		spec.Start, spec.Restore = false, snap.Dir
	}
	stage = "network"
	if ctx, err = o.attachNetwork(ctx, sb, req, &spec); err != nil {
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	stage = "runtime"
	rsb, err := o.cfg.Runtime.Create(ctx, spec)
	if err != nil && snap != nil {
		o.logger(ctx).Warn("restore from the template's start snapshot failed: the start command runs at create", telemetry.KeyError, err.Error())
		snap, spec.Start, spec.Restore = nil, true, ""
		rsb, err = o.cfg.Runtime.Create(ctx, spec)
	}
	if errors.Is(err, runtime.ErrBindTarget) { // a volume mounted over a file of the template
		return nil, fmt.Errorf("%w: volumeMounts: %v", ErrInvalid, err)
	}
	if err != nil {
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	o.drain(ctx, e, rsb, req)
	o.watchOOM(ctx, e)
	e.envd = o.envdClient(sb.ID)
	stage = "envd"
	if err = waitHealthy(ctx, e.envd, 10*time.Second); err != nil {
		return nil, fmt.Errorf("envd in sandbox %s did not come up: %w", sb.ID, err)
	}
	// A restored envd is told again: this sandbox's token, environment and collection.
	init := templateInit(tmpl, req.EnvVars)
	init.CollectOutput = o.collectOutput(sb, req.CollectLogs, tmpl.CollectLogs)
	if sb.EnvdAccessToken != "" {
		init.AccessToken = &sb.EnvdAccessToken
	}
	if err = postInit(ctx, e.envd, init); err != nil {
		return nil, fmt.Errorf("init envd in sandbox %s: %w", sb.ID, err)
	}
	if snap != nil {
		o.logger(ctx).Info("sandbox restored from its template's start snapshot: the start command runs, ready", telemetry.KeyDurationMS, time.Since(begun).Milliseconds())
	} else if tmpl.StartCmd != "" || tmpl.ReadyCmd != "" {
		stage = "start_cmd"
		if err = startTemplateCmd(ctx, e.envd, sb.EnvdAccessToken, deref(init.DefaultUser), deref(init.DefaultWorkdir), tmpl.StartCmd, tmpl.ReadyCmd); err != nil {
			return nil, fmt.Errorf("template %s in sandbox %s: %w", tmpl.Name, sb.ID, err)
		}
	}
	stage = "store"
	if err = o.cfg.Store.InsertSandbox(ctx, sb); err != nil {
		return nil, fmt.Errorf("record sandbox: %w", err)
	}
	// Told before the sandbox is published: from then on the evictor or a kill may change it
	// (sb is e.sb, guarded by e.mu), and its created event must come before its killed one.
	out := copySandbox(sb)
	created := &cove.CreatedEventData{TimeoutSeconds: timeout.Seconds(), Secure: out.Secure, AutoPause: out.AutoPause}
	if snap != nil {
		created.StartSnapshotBuild = snap.BuildID
	}
	o.emit(ctx, events.SandboxCreated, out, created)
	telemetry.SandboxesCreated.WithLabelValues(out.TemplateID).Inc()
	telemetry.SandboxesLive.WithLabelValues(string(store.StateRunning)).Inc()
	telemetry.SandboxCreateSeconds.Observe(time.Since(begun).Seconds())
	o.mu.Lock()
	o.live[sb.ID] = e
	delete(o.creating, sb.ID)
	stopping := o.stopping()
	o.mu.Unlock()
	o.watchInit(e)
	if stopping {
		// Shutdown went through the live sandboxes before this one was among them.
		stage = "shutdown"
		_ = o.kill(o.systemContext(), e, reason.KillServerShutdown, "", "the server shut down while it was being created")
		return nil, fmt.Errorf("create sandbox: %w", o.goneOf(e))
	}
	o.nudge()
	o.logger(ctx).Info("sandbox created", telemetry.KeyDurationMS, time.Since(begun).Milliseconds(),
		telemetry.KeyTimeoutS, timeout.Seconds(), telemetry.KeySecure, out.Secure, telemetry.KeyAutoPause, out.AutoPause, telemetry.KeyEnvNames, out.EnvVarNames,
		telemetry.KeyAllowInternetAccess, out.AllowInternet)
	return out, nil
}

// register records a started sandbox and makes it live: served, watched, timed.
func (o *Orchestrator) register(ctx context.Context, e *entry) error {
	record := o.cfg.Store.InsertSandbox
	if e.moved {
		record = o.cfg.Store.UpdateSandbox // its record exists: it names this node now
	}
	if err := record(ctx, e.sb); err != nil {
		return fmt.Errorf("record sandbox: %w", err)
	}
	o.mu.Lock()
	o.live[e.sb.ID] = e
	o.mu.Unlock()
	o.watchInit(e)
	o.nudge()
	return nil
}

func (o *Orchestrator) clampTimeout(d time.Duration) (time.Duration, error) {
	switch {
	case d == 0:
		return o.cfg.DefaultTimeout, nil
	case d < 0:
		return 0, fmt.Errorf("%w: timeout must not be negative", ErrInvalid)
	case d > o.cfg.MaxTimeout:
		return 0, fmt.Errorf("%w: timeout %s is over the maximum %s", ErrInvalid, d, o.cfg.MaxTimeout)
	}
	return d, nil
}

// withTemplateEnv is the template's environment (what its steps set) under the request's.
func withTemplateEnv(tmpl, req map[string]string) map[string]string {
	if len(tmpl) == 0 {
		return req
	}
	env := maps.Clone(tmpl)
	maps.Copy(env, req)
	return env
}

func hasUser(rootfs, name string) bool {
	b, err := os.ReadFile(filepath.Join(rootfs, "etc/passwd"))
	return err == nil && (bytes.Contains(b, []byte("\n"+name+":")) || bytes.HasPrefix(b, []byte(name+":")))
}

// sandboxRedactor is the global redactor plus the sandbox's own secrets: its access token,
// the caller's API key, and the values of env vars and metadata whose names look secret.
// Commands add the secret values of their own envs as they start (collect).
func (o *Orchestrator) sandboxRedactor(sb *store.Sandbox, req CreateRequest) *redact.Redactor {
	base := o.cfg.Redactor
	if base == nil {
		base = redact.New(redact.Options{})
	}
	return base.With(sandboxSecrets(sb, req)...)
}

// sandboxSecrets are the values a sandbox's redactor masks beside the server's: its access
// token, the request's secrets and env var and metadata values under secret-looking names.
func sandboxSecrets(sb *store.Sandbox, req CreateRequest) []string {
	secrets := append([]string{sb.EnvdAccessToken}, req.Secrets...)
	for _, m := range []map[string]string{req.EnvVars, req.Metadata} {
		for k, v := range m {
			if redact.LooksSecret(k) {
				secrets = append(secrets, v)
			}
		}
	}
	return secrets
}

// redactMetadata masks the known secrets in metadata values: a value equal to an env
// secret, the API key or a value under a secret-looking key is stored, listed, labelled
// and sent in events as "[REDACTED:exact]".
func redactMetadata(r *redact.Redactor, md map[string]string) map[string]string {
	out := make(map[string]string, len(md))
	for k, v := range md {
		out[k], _ = r.Exact(v)
	}
	return out
}

// newID mints an E2B-style sandbox id: "i" and 20 of [a-z0-9].
func newID() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 20)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return "i" + string(b)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
