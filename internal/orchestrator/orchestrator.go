// Package orchestrator owns every sandbox's lifecycle: create, pause, resume, timeouts and
// kill, on top of a runtime.Runtime, the template store and the sandbox records.
//
// The one idea: each sandbox is one state machine (running ⇄ paused → killed) whose
// transitions are serialised by the sandbox's own lock and written through to the store, and
// every kill carries a reason.KillReason from the call that caused it, so "why is it gone?"
// always has an answer: in the log, in the record, in the counter, and in the error a client
// gets when it touches the dead sandbox.
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
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/telemetry"
	"github.com/cove-dev/cove/internal/template"
	"github.com/cove-dev/cove/reason"
)

// EnvdPort is where envd listens inside every sandbox.
const EnvdPort = 49983

// EnvdVersion is the envd protocol version Cove reports.
const EnvdVersion = "0.6.4"

// SystemRequestID marks transitions Cove made by itself (the TTL evictor, shutdown).
const SystemRequestID = "system"

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
	DiskSizeMB     int           // reported disk size; 1024 when 0
	PIDs           int64         // per sandbox; 1024 when 0
	// EnvdArgs are added to every sandbox's `cove envd` command line (record caps, say).
	EnvdArgs []string
	// Collect is every sandbox's collection budget; CollectBudgets override it per team and
	// per template. Each sandbox's envd gets its own as flags.
	Collect        envdapi.Budget
	CollectBudgets envdapi.Budgets
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
func (o *Orchestrator) emit(ctx context.Context, t events.EventType, sb *store.Sandbox, data map[string]any) {
	if o.cfg.Events == nil {
		return
	}
	ev := events.ForSandbox(t, copySandbox(sb))
	ev.Data = data
	_, ev.APIKeyID = telemetry.Caller(ctx)
	if name := telemetry.CallerKeyName(ctx); name != "" {
		if ev.Data == nil {
			ev.Data = map[string]any{}
		}
		ev.Data["api_key_name"] = name
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
}

// Orchestrator runs sandboxes. All methods are safe for concurrent use.
type Orchestrator struct {
	cfg Config

	// mu guards live. Lock order: an entry's mu may be held when taking mu, never the
	// other way round.
	mu   sync.Mutex
	live map[string]*entry

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
	// stopOOM ends the OOM watch (its eventfd and goroutines) when the sandbox ends.
	stopOOM context.CancelFunc
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
	o := &Orchestrator{cfg: cfg, live: map[string]*entry{}, wake: make(chan struct{}, 1), stop: make(chan struct{})}
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
	timeout, err := o.clampTimeout(req.Timeout)
	if err != nil {
		return nil, err
	}
	tmpl, err := o.cfg.Templates.Get(req.TemplateID)
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
		Metadata: req.Metadata, CPUCount: o.cfg.CPUCount, MemoryMB: o.cfg.MemoryMB, DiskSizeMB: o.cfg.DiskSizeMB,
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
	ctx = sandboxLog(ctx, sb)
	e := &entry{sb: sb, closers: map[*closer]struct{}{}}
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
		Args:   o.envdCommand(sb),
		Env:    []string{"COVE_SANDBOX_ID=" + sb.ID},
		Limits: runtime.Limits{MemoryBytes: int64(o.cfg.MemoryMB) << 20, CPUs: float64(o.cfg.CPUCount), PIDs: o.cfg.PIDs},
		Binds:  []runtime.Bind{{Source: o.cfg.CoveBinary, Target: "/.cove/cove", ReadOnly: true}},
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
	init := map[string]any{"envVars": req.EnvVars}
	if collect := req.CollectLogs; collect != nil {
		init["collectOutput"] = *collect
	} else if tmpl.CollectLogs != nil {
		init["collectOutput"] = *tmpl.CollectLogs
	}
	if sb.EnvdAccessToken != "" {
		init["accessToken"] = sb.EnvdAccessToken
	}
	if hasUser(tmpl.Rootfs, template.UserName) {
		init["defaultUser"], init["defaultWorkdir"] = template.UserName, template.UserHome
	}
	if err = postInit(ctx, e.envd, init); err != nil {
		return nil, fmt.Errorf("init envd in sandbox %s: %w", sb.ID, err)
	}
	stage = "store"
	if err = o.cfg.Store.InsertSandbox(ctx, sb); err != nil {
		return nil, fmt.Errorf("record sandbox: %w", err)
	}
	o.mu.Lock()
	o.live[sb.ID] = e
	o.mu.Unlock()
	o.watchInit(e)
	o.nudge()

	o.emit(ctx, events.SandboxCreated, sb, map[string]any{"timeout": timeout.Seconds(), "secure": sb.Secure, "auto_pause": sb.AutoPause})
	telemetry.SandboxesCreated.WithLabelValues(sb.TemplateID).Inc()
	telemetry.SandboxesLive.WithLabelValues(string(store.StateRunning)).Inc()
	telemetry.SandboxCreateSeconds.Observe(time.Since(begun).Seconds())
	o.logger(ctx).Info("sandbox created", "duration_ms", time.Since(begun).Milliseconds(),
		"timeout_s", timeout.Seconds(), "secure", sb.Secure, "auto_pause", sb.AutoPause, "env_names", sb.EnvVarNames,
		"allow_internet_access", sb.AllowInternet)
	return copySandbox(sb), nil
}

// drain collects the sandbox's stdout (output lines and command records) and stderr (envd's
// log lines, also kept in its log file, which outlives the sandbox for post-mortems) into
// the stores, labelled and redacted. A sandbox whose pipes nobody read would block.
func (o *Orchestrator) drain(ctx context.Context, e *entry, rsb *runtime.Sandbox, req CreateRequest) {
	var raw io.Writer
	if o.cfg.LogDir != "" {
		if f, err := os.OpenFile(filepath.Join(o.cfg.LogDir, rsb.ID+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); err == nil {
			e.logFile = f
			raw = f
		}
	}
	secrets := append([]string{e.sb.EnvdAccessToken}, req.Secrets...)
	for k, v := range req.EnvVars {
		if redact.LooksSecret(k) {
			secrets = append(secrets, v)
		}
	}
	base := o.cfg.Redactor
	if base == nil {
		base = redact.New(redact.Options{})
	}
	e.collector = collect.New(collect.Labels{SandboxID: e.sb.ID, TeamID: e.sb.TeamID, TemplateID: e.sb.TemplateID,
		Metadata: e.sb.Metadata}, base.With(secrets...), o.cfg.Logs, o.cfg.Commands, o.logger(ctx))
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

func postInit(ctx context.Context, c *http.Client, body map[string]any) error {
	b, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://envd/init", bytes.NewReader(b))
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
