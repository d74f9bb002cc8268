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

	"github.com/cove-dev/cove/internal/builder/template"
	"github.com/cove-dev/cove/internal/control/snapshot"
	"github.com/cove-dev/cove/internal/observe/redact"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/sandbox/egress"
	"github.com/cove-dev/cove/internal/store"
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
	Network *egress.Policy
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

// Create starts a sandbox from a template and returns it once envd answers: a pooled one
// when the template's warm pool can serve the request, else a cold start (launch).
func (o *Orchestrator) Create(ctx context.Context, req CreateRequest) (*store.Sandbox, error) {
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
	sb := o.newRecord(ctx, tmpl, timeout)
	sb.TemplateID = req.TemplateID // as asked for (a tag, say)
	ownedBy(sb, req)
	p := &plan{kind: launchCreate, sb: sb, tmpl: tmpl, req: req, timeout: timeout, begun: begun}
	// A template's start snapshot has its start command running and ready: restore it.
	var why string
	if p.snap, why = o.startSnapshot(tmpl, req); why != "" {
		o.logger(sandboxLog(ctx, sb)).Info("the template's start snapshot is not used (" + why + "): the start command runs at create")
	}
	_, out, err := o.launch(ctx, p)
	return out, err
}

// newRecord is the record of a new sandbox of tmpl on this node, of no team yet, running from
// now for timeout: the template's size and engine, the server's where it names none.
func (o *Orchestrator) newRecord(ctx context.Context, tmpl *template.Template, timeout time.Duration) *store.Sandbox {
	now := time.Now()
	return &store.Sandbox{Node: o.cfg.Node, ID: newID(), TemplateID: tmpl.Name, State: store.StateRunning, Metadata: map[string]string{},
		CPUCount: orDefault(tmpl.CPUCount, o.cfg.CPUCount), MemoryMB: orDefault(tmpl.MemoryMB, o.cfg.MemoryMB), DiskSizeMB: o.cfg.DiskSizeMB,
		Runtime: o.engineFor(tmpl), EnvdVersion: EnvdVersion, StartedAt: now, EndAt: now.Add(timeout), CreatedBy: requestID(ctx), UpdatedAt: now}
}

// ownedBy makes sb the sandbox req asks for: the caller's team, metadata, settings, env var
// names and, when secure, an access token of its own.
func ownedBy(sb *store.Sandbox, req CreateRequest) {
	sb.TeamID, sb.Secure, sb.AutoPause, sb.AutoResume, sb.AutoPauseKind = req.TeamID, req.Secure, req.AutoPause, req.AutoResume, req.AutoPauseKind
	sb.Metadata = maps.Clone(req.Metadata)
	if sb.Metadata == nil {
		sb.Metadata = map[string]string{}
	}
	sb.EnvVarNames = nil
	for k := range req.EnvVars {
		sb.EnvVarNames = append(sb.EnvVarNames, k)
	}
	if req.Secure {
		sb.EnvdAccessToken = randomHex(16)
	}
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
