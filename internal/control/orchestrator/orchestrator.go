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
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/cove-dev/cove/internal/builder/template"
	"github.com/cove-dev/cove/internal/control/authz"
	"github.com/cove-dev/cove/internal/control/snapshot"
	"github.com/cove-dev/cove/internal/control/vault"
	"github.com/cove-dev/cove/internal/observe/collect"
	"github.com/cove-dev/cove/internal/observe/events"
	"github.com/cove-dev/cove/internal/observe/redact"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/sandbox/runtime"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/sdk/envdapi"
	"github.com/cove-dev/cove/sdk/reason"
	"github.com/cove-dev/cove/sdk/requestid"
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
	// Engine runs the sandboxes of templates that require none (runtime.Engine's name);
	// runc when "".
	Engine string
	// Node is this server's name in a cluster (cove server --node): every sandbox it starts
	// is recorded with it, and it adopts and sweeps only those. "" on a lone server.
	Node string
	// Mover, in a cluster with an object store, carries snapshot-paused sandboxes between
	// nodes: a pause uploads the checkpoint, and a resume on another node, once the pausing
	// node is lost, takes the sandbox over (node.go). nil: a paused sandbox resumes where it
	// was paused.
	Mover Mover
	// Placement, in a cluster, is the shared ledger each sandbox reserves its vCPUs and
	// memory in, on Node and against its team's cluster-wide quota, in one transaction: racing
	// creates on several nodes never overcommit a node or a team. nil on a lone server.
	Placement Placement

	DefaultTimeout time.Duration // 300 s when 0
	MaxTimeout     time.Duration // 24 h when 0
	CPUCount       int           // per sandbox; 2 when 0
	MemoryMB       int           // per sandbox; 512 when 0
	DiskSizeMB     int           // each sandbox's disk: writes past it get ENOSPC; 1024 when 0
	PIDs           int64         // per sandbox; 512 when 0
	// Pools is how many started sandboxes to keep per template name (cove server --pool); a
	// size set through SetPoolSize, recorded in PoolSizes, wins. A nil PoolSizes keeps
	// those in memory only.
	Pools     map[string]int
	PoolSizes store.PoolSizes
	// PoolMax bounds one template's pool (DefaultPoolMax when 0); PoolRefillPerSec bounds
	// the boots that refill the pools (4 a second when 0).
	PoolMax          int
	PoolRefillPerSec float64
	// HostFilesFreePercent is the share of the host's open files (fs.file-max) a create
	// leaves free: below it creates are refused (503). 10 when 0, none when negative.
	HostFilesFreePercent int
	// Snapshots keeps snapshots, and the short-lived exports forks start from; nil turns
	// forks and snapshots off.
	Snapshots *snapshot.Store
	// Vault keeps, sealed, the secrets each sandbox's output is redacted of, so a server
	// that adopts it after a restart masks them too (secrets.go); nil keeps them in memory
	// only.
	Vault *vault.Vault
	// Volumes keeps the teams' volumes, which the orchestrator binds into sandboxes at their
	// launch and lets go of at their end or move; the volume API is internal/control/volumes.
	// nil turns volumes off.
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

// Events receives lifecycle events (events.Bus in cove server).
type Events = events.Emitter

// emit sends a lifecycle event for sb; a failure is logged and never fails the transition.
// data is t's payload type from the SDK (cove.EventDataFor), as a pointer.
func (o *Orchestrator) emit(ctx context.Context, t events.EventType, sb *store.Sandbox, data interface{ SetAPIKeyName(string) }) {
	if o.cfg.Events == nil {
		return
	}
	ev := events.ForSandbox(t, copySandbox(sb))
	ev.Data = data
	ev.APIKeyID = authz.From(ctx).KeyID
	if name := authz.From(ctx).KeyName; name != "" {
		data.SetAPIKeyName(name)
	}
	events.EmitOrWarn(ctx, o.cfg.Events, ev, o.logger(ctx))
}

// Orchestrator runs sandboxes. All methods are safe for concurrent use.
type Orchestrator struct {
	cfg Config

	// mu guards live. Lock order: an entry's mu may be held when taking mu, never the
	// other way round.
	mu   sync.Mutex
	live map[string]*entry
	// takeovers serialises the take-overs of one sandbox (node.go): id → *sync.Mutex, dropped
	// when the sandbox is killed.
	takeovers sync.Map
	// moving holds the sandboxes a drain is moving away (Migrate), closed once it is over.
	moving   map[string]chan struct{}
	creating map[string]reservation // creates in flight, counted against their team's quota
	rates    map[string]*bucket     // each team's create-rate bucket

	wake   chan struct{} // the evictor recomputes its next deadline
	stop   chan struct{}
	closed sync.Once
	wg     sync.WaitGroup

	// poolMu guards the warm pools (pool.go). Never held with mu or an entry's mu.
	poolMu      sync.Mutex
	pools       map[string]*warmPool
	poolsOpen   bool          // Recover ran: what it finds without a record is no longer swept
	poolsClosed bool          // the server is stopping: nothing is pooled any more
	poolWake    chan struct{} // the pool filler looks again

	limits *events.Limits // team.limit.reached, sampled (limits.go)
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
	// remote: the sandbox ran on another cluster node, now lost (NodeLost); killing it only
	// ends its record here: nothing of it is on this node to destroy.
	remote bool
	// moved: paused on another node, resumed on this one (takeOver): its record exists.
	moved bool
	// shared: its snapshot pause is in the cluster's object store (Mover), for another node
	// to resume; false once it runs again.
	shared bool
	// onDisk: paused as a snapshot: no process runs, resume restores it.
	onDisk bool
	// boots counts the sandbox's reboots (filesystem-only pauses resumed): an init's exit
	// watched from an earlier boot is not the sandbox's death.
	boots int
	// bootEnv is envd's environment, kept at a filesystem-only pause for the reboot.
	bootEnv map[string]string
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
		// Each pid may hold RLIMIT_NOFILE files (runtime.DefaultNoFile): 512 bounds their
		// product, and a fork bomb's size.
		cfg.PIDs = 512
	}
	if cfg.PauseKind == "" {
		cfg.PauseKind = reason.PauseFreeze
		if ck, ok := cfg.Runtime.(runtime.Checkpointer); ok {
			if err := ck.CanCheckpoint(); err == nil {
				cfg.PauseKind = reason.PauseSnapshot
			} else {
				cfg.Logger.Warn("pause freezes sandboxes in RAM: snapshots unavailable", telemetry.KeyError, err.Error())
			}
		}
	}
	if !cfg.PauseKind.KeepsMemory() {
		// A default pause without memory would turn every auto-resume sandbox's TTL pause
		// into one traffic cannot resume: it is asked for per sandbox or per pause.
		return nil, fmt.Errorf("orchestrator: the default pause kind must keep memory (snapshot or freeze), not %s", cfg.PauseKind)
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
	o := &Orchestrator{cfg: cfg, live: map[string]*entry{}, moving: map[string]chan struct{}{}, creating: map[string]reservation{}, rates: map[string]*bucket{}, wake: make(chan struct{}, 1), stop: make(chan struct{}),
		poolWake: make(chan struct{}, 1)}
	o.limits = events.NewLimits(cfg.Events, cfg.Logger) // nil without Events: tells nobody
	o.watchDisk()
	if err := o.initPools(); err != nil {
		return nil, err
	}
	o.wg.Add(2)
	go o.evictor()
	go o.poolFiller()
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

func requestID(ctx context.Context) string {
	if id := telemetry.RequestID(ctx); id != "" {
		return id
	}
	return SystemRequestID
}

func sandboxLog(ctx context.Context, sb *store.Sandbox) context.Context {
	return telemetry.With(ctx, telemetry.KeySandboxID, sb.ID, telemetry.KeyTeamID, sb.TeamID, telemetry.KeyTemplateID, sb.TemplateID)
}

// orDefault is a template's own size (cpuCount, memoryMB) when it sets one, else the server's.
func orDefault(own, def int) int {
	if own > 0 {
		return own
	}
	return def
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
