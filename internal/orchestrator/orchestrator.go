// Package orchestrator owns every sandbox's lifecycle: create, pause, resume, timeouts and
// kill, on top of a runtime.Runtime, the template store and the sandbox records.
//
// The one idea: each sandbox is one state machine (running ⇄ paused → killed) whose
// transitions are serialised by the sandbox's own lock and written through to the store, and
// every kill carries a reason.KillReason from the call that caused it, so "why is it gone?"
// always has an answer: in the log, in the record, in the counter, and in the error a client
// gets when it touches the dead sandbox.
//
// It must not import the edges that call it (api, proxy, console, server); they reach it through
// their own small interfaces.
package orchestrator

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/cove-dev/cove/internal/collect"
	"github.com/cove-dev/cove/internal/envd/envdapi"
	"github.com/cove-dev/cove/internal/events"
	"github.com/cove-dev/cove/internal/network"
	"github.com/cove-dev/cove/internal/redact"
	"github.com/cove-dev/cove/internal/runtime"
	"github.com/cove-dev/cove/internal/snapshot"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/telemetry"
	"github.com/cove-dev/cove/internal/template"
	"github.com/cove-dev/cove/reason"
	"github.com/cove-dev/cove/requestid"
	cove "github.com/cove-dev/cove/sdk"
)

// EnvdPort is where envd listens inside every sandbox.
const EnvdPort = envdapi.Port

// EnvdVersion is the envd protocol version Cove reports.
const EnvdVersion = envdapi.Version

// SystemRequestID marks transitions Cove made by itself (the TTL evictor, shutdown).
const SystemRequestID = requestid.System

// Runtime is what the orchestrator needs of a sandbox runtime: the Runtime interface and a
// listing of the sandboxes it holds, to clean up after a crash.
type Runtime interface {
	runtime.Runtime
	List(ctx context.Context) ([]string, error)
	// OOMEvents reports the sandbox's OOM kill count each time the OOM killer acts in it.
	OOMEvents(ctx context.Context, id string) (<-chan uint64, error)
	// Processes lists the sandbox's processes, biggest memory first.
	Processes(ctx context.Context, id string) ([]runtime.Process, error)
}

// Config configures an Orchestrator.
type Config struct {
	Store     store.Sandboxes
	Runtime   Runtime
	Templates *template.Store
	// CoveBinary is the static cove binary bind-mounted read-only into every sandbox as envd.
	CoveBinary string
	// LogDir keeps each sandbox's envd output, <LogDir>/<id>.log, after the sandbox is gone.
	LogDir string
	Logger *slog.Logger

	// Events receives every lifecycle event; nil drops them.
	Events Events
	// Logs and Commands receive each sandbox's log lines and command records; nil skips.
	Logs     collect.Logs
	Commands store.CommandStore
	// Redactor masks secrets in everything collected; each sandbox adds its own secrets.
	Redactor *redact.Redactor
	// Network gives sandboxes egress; nil leaves them loopback only.
	Network Network

	DefaultTimeout time.Duration // 300 s when 0
	MaxTimeout     time.Duration // 24 h when 0
	CPUCount       int           // per sandbox; 2 when 0
	MemoryMB       int           // per sandbox; 512 when 0
	DiskSizeMB     int           // each sandbox's disk: writes past it get ENOSPC; 1024 when 0
	PIDs           int64         // per sandbox; 1024 when 0
	// Snapshots keeps snapshots, and the short-lived exports forks start from; nil turns
	// forks and snapshots off.
	Snapshots *snapshot.Store
	// Volumes keeps the teams' volumes; nil turns volumes off.
	Volumes *snapshot.Volumes
	// PauseKind is how Pause pauses when the call does not say: snapshot (to disk, the
	// default where the runtime can checkpoint) or freeze (memory stays in RAM).
	PauseKind reason.PauseKind
	// EnvdArgs are added to every sandbox's `cove envd` command line (record caps, say).
	EnvdArgs []string
	// Collect is every sandbox's collection budget; CollectBudgets override it per team and
	// per template. Each sandbox's envd gets its own as flags.
	Collect        envdapi.Budget
	CollectBudgets envdapi.Budgets
	// Quotas bound each team's sandboxes, vCPUs, memory and create rate; zero: none.
	Quotas Quotas
}

// envdCommand is the command line of sb's envd: the server's args, then sb's budget.
func (o *Orchestrator) envdCommand(sb *store.Sandbox) []string {
	args := append([]string{"/.cove/cove", "envd", "--addr", fmt.Sprintf("0.0.0.0:%d", EnvdPort)}, o.cfg.EnvdArgs...)
	return append(args, o.cfg.CollectBudgets.For(o.cfg.Collect, sb.TeamID, sb.TemplateID).Args()...)
}

// Events receives lifecycle events (events.Bus in cove server).
type Events interface {
	Emit(ctx context.Context, ev events.Event) error
}

// emit sends a lifecycle event for sb; a failure is logged and never fails the transition.
// data is t's payload type from the SDK (cove.EventDataFor), as a pointer.
func (o *Orchestrator) emit(ctx context.Context, t events.EventType, sb *store.Sandbox, data interface{ SetAPIKeyName(string) }) {
	if o.cfg.Events == nil {
		return
	}
	ev := events.ForSandbox(t, copySandbox(sb))
	ev.Data = data
	_, ev.APIKeyID = telemetry.Caller(ctx)
	if name := telemetry.CallerKeyName(ctx); name != "" {
		data.SetAPIKeyName(name)
	}
	if err := o.cfg.Events.Emit(context.WithoutCancel(ctx), ev); err != nil {
		telemetry.Warnings.Warn(ctx, o.logger(ctx), t.String(), "event not recorded", "event.type", t.String(), "error", err.Error())
	}
}

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
	// Secrets are values to mask in everything collected from the sandbox (the caller's API
	// key); env var values whose names look secret are added too.
	Secrets []string
	// CollectLogs switches the collection of command output lines (default on).
	CollectLogs *bool
	// VolumeMounts mounts the team's volumes into the sandbox, read-write.
	VolumeMounts []VolumeMount
}

// Orchestrator runs sandboxes. All methods are safe for concurrent use.
type Orchestrator struct {
	cfg Config

	// mu guards live. Lock order: an entry's mu may be held when taking mu, never the
	// other way round.
	mu       sync.Mutex
	live     map[string]*entry
	creating map[string]reservation // creates in flight, counted against their team's quota
	rates    map[string]*bucket     // each team's create-rate bucket

	wake   chan struct{} // the evictor recomputes its next deadline
	stop   chan struct{}
	closed sync.Once
	wg     sync.WaitGroup
}

// entry is one live (running or paused) sandbox.
type entry struct {
	mu        sync.Mutex // serialises this sandbox's transitions
	sb        *store.Sandbox
	killed    bool
	closers   map[*closer]struct{}
	envd      *http.Client
	logFile   *os.File
	drainers  sync.WaitGroup
	collector *collect.Collector
	redactor  *redact.Redactor // the sandbox's: global secrets plus its own
	// stopOOM ends the OOM watch (its eventfd and goroutines) when the sandbox ends.
	stopOOM context.CancelFunc
	// pipes are the read ends of the sandbox's stdout and stderr, closed when the server
	// lets go of the sandbox without killing it (Detach).
	pipes []io.Closer
	// adopted: this server took the sandbox over from an earlier one (Recover), so command
	// records it did not see start may be open when the sandbox ends.
	adopted bool
	// detached: the server let go of the sandbox (Detach); its init's exit is not ours to act on.
	detached bool
	// onDisk: paused as a snapshot: no process runs, resume restores it.
	onDisk bool
	// volumes are the ids of the volumes mounted in the sandbox (as this server made it).
	volumes []string
	// trafficToken guards the sandbox's ports when they are private; set at create, as
	// are maskHost and httpsPorts (how the proxy reaches its ports).
	trafficToken string
	maskHost     string
	httpsPorts   []int
}

// stopWatching releases what watches the sandbox from the host; safe to call twice.
func (e *entry) stopWatching() {
	if e.stopOOM != nil {
		e.stopOOM()
	}
}

type closer struct{ c io.Closer }

// New returns an orchestrator and starts its TTL evictor. Call Recover before serving.
func New(cfg Config) (*Orchestrator, error) {
	if cfg.Store == nil || cfg.Runtime == nil || cfg.Templates == nil {
		return nil, errors.New("orchestrator: store, runtime and templates are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = telemetry.Logger(context.Background())
	}
	if cfg.DefaultTimeout <= 0 {
		cfg.DefaultTimeout = 300 * time.Second
	}
	if cfg.MaxTimeout <= 0 {
		cfg.MaxTimeout = 24 * time.Hour
	}
	if cfg.CPUCount <= 0 {
		cfg.CPUCount = 2
	}
	if cfg.MemoryMB <= 0 {
		cfg.MemoryMB = 512
	}
	if cfg.DiskSizeMB <= 0 {
		cfg.DiskSizeMB = 1024
	}
	if cfg.PIDs <= 0 {
		cfg.PIDs = 1024
	}
	if cfg.PauseKind == "" {
		cfg.PauseKind = reason.PauseFreeze
		if ck, ok := cfg.Runtime.(runtime.Checkpointer); ok {
			if err := ck.CanCheckpoint(); err == nil {
				cfg.PauseKind = reason.PauseSnapshot
			} else {
				cfg.Logger.Warn("pause freezes sandboxes in RAM: snapshots unavailable", "error", err.Error())
			}
		}
	}
	if cfg.CoveBinary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("orchestrator: find the cove binary: %w", err)
		}
		cfg.CoveBinary = exe
	}
	if cfg.LogDir != "" {
		if err := os.MkdirAll(cfg.LogDir, 0o700); err != nil {
			return nil, fmt.Errorf("orchestrator: %w", err)
		}
	}
	telemetry.Metrics()
	o := &Orchestrator{cfg: cfg, live: map[string]*entry{}, creating: map[string]reservation{}, rates: map[string]*bucket{}, wake: make(chan struct{}, 1), stop: make(chan struct{})}
	o.wg.Add(1)
	go o.evictor()
	return o, nil
}

// logger is the call's logger; calls Cove makes itself carry the orchestrator's.
func (o *Orchestrator) logger(ctx context.Context) *slog.Logger { return telemetry.Logger(ctx) }

// systemContext is the context of a transition Cove makes by itself (evictor, shutdown).
func (o *Orchestrator) systemContext() context.Context {
	return telemetry.WithRequestID(telemetry.WithLogger(context.Background(), o.cfg.Logger), SystemRequestID)
}

// stopping reports whether Shutdown has begun.
func (o *Orchestrator) stopping() bool {
	select {
	case <-o.stop:
		return true
	default:
		return false
	}
}

func (o *Orchestrator) nudge() {
	select {
	case o.wake <- struct{}{}:
	default:
	}
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

func requestID(ctx context.Context) string {
	if id := telemetry.RequestID(ctx); id != "" {
		return id
	}
	return SystemRequestID
}

func sandboxLog(ctx context.Context, sb *store.Sandbox) context.Context {
	return telemetry.With(ctx, telemetry.KeySandboxID, sb.ID, telemetry.KeyTeamID, sb.TeamID, telemetry.KeyTemplateID, sb.TemplateID)
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
	now := time.Now()
	sb := &store.Sandbox{
		ID: newID(), TeamID: req.TeamID, TemplateID: req.TemplateID, State: store.StateRunning,
		Metadata: req.Metadata, CPUCount: orDefault(tmpl.CPUCount, o.cfg.CPUCount), MemoryMB: orDefault(tmpl.MemoryMB, o.cfg.MemoryMB), DiskSizeMB: o.cfg.DiskSizeMB,
		EnvdVersion: EnvdVersion, Secure: req.Secure, AutoPause: req.AutoPause, AutoResume: req.AutoResume,
		AllowInternet: false, StartedAt: now, EndAt: now.Add(timeout), CreatedBy: requestID(ctx), UpdatedAt: now,
	}
	if sb.Metadata == nil {
		sb.Metadata = map[string]string{}
	}
	for k := range req.EnvVars {
		sb.EnvVarNames = append(sb.EnvVarNames, k)
	}
	if req.Secure {
		sb.EnvdAccessToken = randomHex(16)
	}
	o.mu.Lock()
	err = o.admit(sb.ID, sb.TeamID, sb.CPUCount, sb.MemoryMB, now)
	o.mu.Unlock()
	if err != nil {
		telemetry.SandboxCreateFailures.WithLabelValues("quota").Inc()
		return nil, err
	}
	defer func() {
		o.mu.Lock()
		delete(o.creating, sb.ID) // when the create failed
		o.mu.Unlock()
	}()
	e := &entry{sb: sb, closers: map[*closer]struct{}{}, redactor: o.sandboxRedactor(sb, req)}
	sb.Metadata = redactMetadata(e.redactor, sb.Metadata)
	ctx = sandboxLog(ctx, sb)
	binds := []runtime.Bind{{Source: o.cfg.CoveBinary, Target: "/.cove/cove", ReadOnly: true}}
	vb, vids, err := o.volumeBinds(req.TeamID, req.VolumeMounts)
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
		ID:     sb.ID,
		Rootfs: tmpl.Rootfs,
		Layers: tmpl.LayerDirs,
		Args:   o.envdCommand(sb),
		Env:    []string{"COVE_SANDBOX_ID=" + sb.ID},
		Limits: runtime.Limits{MemoryBytes: int64(sb.MemoryMB) << 20, CPUs: float64(sb.CPUCount), PIDs: o.cfg.PIDs, DiskBytes: int64(o.cfg.DiskSizeMB) << 20},
		Binds:  binds,
		Start:  true,
	}
	stage = "network"
	if ctx, err = o.attachNetwork(ctx, sb, req, &spec); err != nil {
		return nil, fmt.Errorf("create sandbox: %w", err)
	}
	stage = "runtime"
	rsb, err := o.cfg.Runtime.Create(ctx, spec)
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
	init := envdapi.Init{EnvVars: withTemplateEnv(tmpl.Env, req.EnvVars), CollectOutput: o.collectOutput(sb, req.CollectLogs, tmpl.CollectLogs)}
	if sb.EnvdAccessToken != "" {
		init.AccessToken = &sb.EnvdAccessToken
	}
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
	if err = postInit(ctx, e.envd, init); err != nil {
		return nil, fmt.Errorf("init envd in sandbox %s: %w", sb.ID, err)
	}
	if tmpl.StartCmd != "" || tmpl.ReadyCmd != "" {
		stage = "start_cmd"
		var user, cwd string
		if init.DefaultUser != nil {
			user = *init.DefaultUser
		}
		if init.DefaultWorkdir != nil {
			cwd = *init.DefaultWorkdir
		}
		if err = startTemplateCmd(ctx, e.envd, sb.EnvdAccessToken, user, cwd, tmpl.StartCmd, tmpl.ReadyCmd); err != nil {
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
	o.emit(ctx, events.SandboxCreated, out, &cove.CreatedEventData{TimeoutSeconds: timeout.Seconds(), Secure: out.Secure, AutoPause: out.AutoPause})
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
	o.logger(ctx).Info("sandbox created", "duration_ms", time.Since(begun).Milliseconds(),
		"timeout_s", timeout.Seconds(), "secure", out.Secure, "auto_pause", out.AutoPause, "env_names", out.EnvVarNames,
		"allow_internet_access", out.AllowInternet)
	return out, nil
}

// register records a started sandbox and makes it live: served, watched, timed.
func (o *Orchestrator) register(ctx context.Context, e *entry) error {
	if err := o.cfg.Store.InsertSandbox(ctx, e.sb); err != nil {
		return fmt.Errorf("record sandbox: %w", err)
	}
	o.mu.Lock()
	o.live[e.sb.ID] = e
	o.mu.Unlock()
	o.watchInit(e)
	o.nudge()
	return nil
}

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
		// An adopted or restored sandbox: its creating request's secrets are not known here.
		e.redactor = o.sandboxRedactor(e.sb, req)
	}
	e.collector = collect.New(collect.Labels{SandboxID: e.sb.ID, TeamID: e.sb.TeamID, TemplateID: e.sb.TemplateID},
		e.redactor, o.cfg.Logs, o.cfg.Commands, o.logger(ctx))
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

// sandboxRedactor is the global redactor plus the sandbox's own secrets: its access token,
// the caller's API key, and the values of env vars and metadata whose names look secret.
// Commands add the secret values of their own envs as they start (collect).
func (o *Orchestrator) sandboxRedactor(sb *store.Sandbox, req CreateRequest) *redact.Redactor {
	secrets := append([]string{sb.EnvdAccessToken}, req.Secrets...)
	for _, m := range []map[string]string{req.EnvVars, req.Metadata} {
		for k, v := range m {
			if redact.LooksSecret(k) {
				secrets = append(secrets, v)
			}
		}
	}
	base := o.cfg.Redactor
	if base == nil {
		base = redact.New(redact.Options{})
	}
	return base.With(secrets...)
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

func (e *entry) closeLog() {
	if e.logFile != nil {
		go func(f *os.File) { e.drainers.Wait(); _ = f.Close() }(e.logFile)
	}
}

// watchInit kills the sandbox, with the reason, if its envd exits on its own or is OOM-killed.
func (o *Orchestrator) watchInit(e *entry) {
	id := e.sb.ID
	o.wg.Add(1)
	go func() {
		defer o.wg.Done()
		ex, err := o.cfg.Runtime.Wait(context.Background(), id)
		if err != nil {
			return
		}
		e.mu.Lock()
		detached := e.detached
		e.mu.Unlock()
		if detached || ex.Checkpointed {
			return // let go of, or on disk: a restore watches the new init
		}
		why := reason.KillEnvdExited
		if ex.OOMKilled {
			why = reason.KillOOM
		}
		ctx := o.systemContext()
		if err := o.kill(ctx, e, why, "", fmt.Sprintf("envd exited: code %d signal %q", ex.Code, ex.Signal)); err == nil {
			o.logger(ctx).Warn("sandbox init exited", telemetry.KeySandboxID, id, "exit_code", ex.Code, "signal", ex.Signal, "oom_killed", ex.OOMKilled)
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
		logger.Warn("oom events unavailable", "error", err.Error())
		return
	}
	go func() {
		for n := range oom {
			attrs := []any{"oom_kills", n}
			if st, err := o.cfg.Runtime.Stats(context.Background(), id); err == nil {
				attrs = append(attrs, "memory.limit_bytes", st.MemoryLimit, "memory.max_usage_bytes", st.MemoryMaxUsage)
			}
			logger.Warn("sandbox oom kill", attrs...)
			o.mu.Lock()
			e := o.live[id]
			o.mu.Unlock()
			if e != nil {
				e.mu.Lock()
				sb := copySandbox(e.sb)
				e.mu.Unlock()
				o.emit(o.systemContext(), events.SandboxOOM, sb, events.OOMData(int(n)))
			}
		}
	}()
}

// orDefault is a template's own size (cpuCount, memoryMB) when it sets one, else the server's.
func orDefault(own, def int) int {
	if own > 0 {
		return own
	}
	return def
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

// envdClient reaches envd inside the sandbox's network namespace.
func (o *Orchestrator) envdClient(id string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return o.cfg.Runtime.Dial(ctx, id, network, fmt.Sprintf("127.0.0.1:%d", EnvdPort))
		},
		MaxIdleConns: 2, IdleConnTimeout: 30 * time.Second,
	}}
}

func waitHealthy(ctx context.Context, c *http.Client, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var last error
	begun := time.Now()
	for {
		// envd is usually up within 10 ms of start: poll every millisecond at first, so its
		// readiness is noticed at once, then back off.
		delay := time.Millisecond
		if time.Since(begun) > 50*time.Millisecond {
			delay = 10 * time.Millisecond
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://envd/health", nil)
		res, err := c.Do(req)
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusNoContent {
				return nil
			}
			err = fmt.Errorf("health answered %s", res.Status)
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), last)
		case <-time.After(delay):
		}
	}
}

func postInit(ctx context.Context, c *http.Client, body envdapi.Init) error {
	b, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://envd"+envdapi.InitPath, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	if id := telemetry.RequestID(ctx); id != "" {
		req.Header.Set(telemetry.HeaderRequestID, id)
	}
	res, err := c.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusNoContent {
		msg, _ := io.ReadAll(io.LimitReader(res.Body, 4096))
		return fmt.Errorf("init answered %s: %s", res.Status, strings.TrimSpace(string(msg)))
	}
	return nil
}

func copySandbox(sb *store.Sandbox) *store.Sandbox {
	c := *sb
	c.Metadata = make(map[string]string, len(sb.Metadata))
	for k, v := range sb.Metadata {
		c.Metadata[k] = v
	}
	c.EnvVarNames = append([]string(nil), sb.EnvVarNames...)
	return &c
}
