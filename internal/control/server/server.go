// Package server composes `cove server`: the REST API, the proxy and /metrics on one port,
// over the orchestrator, the runc runtime, the template store and the store (the embedded
// SQLite file, or PostgreSQL with --state).
//
// The one idea: first run on a bare Debian machine must just work. Run installs the Debian
// packages it needs, builds the base template with its progress shown, creates a team and an
// API key, and prints the two environment variables the official E2B SDK needs.
package server

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cove-dev/cove/internal/blob"
	"github.com/cove-dev/cove/internal/builder/template"
	"github.com/cove-dev/cove/internal/builder/template/build"
	"github.com/cove-dev/cove/internal/control/api"
	"github.com/cove-dev/cove/internal/control/api/teamroutes"
	"github.com/cove-dev/cove/internal/control/console"
	"github.com/cove-dev/cove/internal/control/netpolicy"
	"github.com/cove-dev/cove/internal/control/oidc"
	"github.com/cove-dev/cove/internal/control/orchestrator"
	"github.com/cove-dev/cove/internal/control/proxy"
	"github.com/cove-dev/cove/internal/control/secrets"
	"github.com/cove-dev/cove/internal/control/snapshot"
	"github.com/cove-dev/cove/internal/control/vault"
	"github.com/cove-dev/cove/internal/control/volumes"
	"github.com/cove-dev/cove/internal/httpx"
	"github.com/cove-dev/cove/internal/observe/events"
	"github.com/cove-dev/cove/internal/observe/logs"
	"github.com/cove-dev/cove/internal/observe/redact"
	"github.com/cove-dev/cove/internal/observe/retention"
	"github.com/cove-dev/cove/internal/observe/sampler"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/observe/trace"
	"github.com/cove-dev/cove/internal/sandbox/egress"
	"github.com/cove-dev/cove/internal/sandbox/network"
	"github.com/cove-dev/cove/internal/sandbox/runtime"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/store/postgres"
	"github.com/cove-dev/cove/internal/store/sqlite"
	cove "github.com/cove-dev/cove/sdk"
	"github.com/cove-dev/cove/sdk/envdapi"
	"github.com/cove-dev/cove/sdk/reason"
	shipped "github.com/cove-dev/cove/templates"
)

// Config configures Run.
type Config struct {
	Addr    string // listen address; 127.0.0.1:3000 by default
	DataDir string // state, templates, sandboxes and logs; /var/lib/cove by default
	Domain  string // sandbox host domain for {port}-{id}.{domain} routing, with :port when not 443 or 80
	// TLSCert and TLSKey are the server's certificate and key (a wildcard one for the sandbox
	// hosts); TLSSelfSigned makes them from a CA of the data dir's. Either serves TLS only.
	TLSCert, TLSKey string
	TLSSelfSigned   bool
	// TemplateDir is the template store; <DataDir>/templates when empty.
	TemplateDir string
	// State is where the records live (ParseState): the data dir's SQLite file when empty or
	// "sqlite", another SQLite file as sqlite:///PATH, or a PostgreSQL database as
	// postgres://USER@HOST:PORT/DB?…. The vault's key stays in the data dir either way.
	State string
	// SampleInterval is how often each sandbox's resources are sampled; 5 s when 0.
	SampleInterval time.Duration
	// Retention is how long log lines and ended commands are kept; 7 days when 0.
	Retention time.Duration
	// Retain sets a dataset's TTL and size cap, over the defaults and Retention.
	Retain map[store.Dataset]retention.Policy
	// RecordHeadBytes and RecordTailBytes are how much of each command's stdout and stderr
	// its record keeps from the start and the end; 4 KiB each when 0.
	RecordHeadBytes, RecordTailBytes int
	// Collect is each sandbox's budget of output collected as log lines (envd's defaults
	// where zero); CollectBudgets override it per team and per template. Output past a
	// budget is dropped and counted.
	Collect        envdapi.Budget
	CollectBudgets envdapi.Budgets
	// Quotas bound each team's sandboxes, vCPUs, memory and create rate (429 past them).
	Quotas orchestrator.Quotas
	// DiskSizeMB is each sandbox's disk: writes past it get ENOSPC; 1024 when 0.
	DiskSizeMB int
	// VolumeSizeMB is a new volume's size quota when its create does not say; 0 makes
	// volumes plain directories without one.
	VolumeSizeMB int
	// WebhookAllowNets are ranges webhook deliveries may reach although they are loopback,
	// link-local, private or the server's own (refused otherwise).
	WebhookAllowNets []netip.Prefix
	// CoveBinary is the static cove binary run as envd in every sandbox; this process's own
	// executable when empty (tests that run the server in-process name a built one).
	CoveBinary string
	// OnStop is what a stop (SIGTERM, SIGINT) does to the sandboxes: keep them running for
	// the next start to adopt (the default), or kill them with reason server_shutdown.
	OnStop StopAction
	// PauseKind is how a pause that does not say pauses: snapshot (to disk, where CRIU 4
	// works) or freeze; "" picks snapshot when the runtime can, else freeze.
	PauseKind reason.PauseKind
	// SandboxMemoryMB is each sandbox's memory limit; 512 when 0.
	SandboxMemoryMB int
	// LogTeamBytesPerHour is the log bytes a team's sandboxes may store per hour (2 GiB when
	// 0, none when negative), LogMinFreeMB the free space the data dir's disk keeps, below
	// which log lines are dropped (1024 when 0, none when negative).
	LogTeamBytesPerHour int64
	LogMinFreeMB        int64
	// HostFilesFreePercent is the share of the host's open files creates leave free (10
	// when 0, none when negative): below it they answer 503.
	HostFilesFreePercent int
	// BuildStepTimeout kills a template build's step that runs longer (0: no limit).
	BuildStepTimeout time.Duration
	// BuildTimeout cancels a whole template build that runs longer (0: no limit).
	BuildTimeout time.Duration
	// LazyRestore resumes snapshots with their memory served on demand (runtime.Config).
	LazyRestore bool
	// Runtime is the engine sandboxes run on: runc, or gVisor's runsc (runtime.Config's
	// DefaultEngine); runc when empty.
	Runtime runtime.Engine
	// Pools sizes the warm pools by template name (a size set through the API wins);
	// PoolMax bounds one pool, PoolRefillPerSec the boots that refill them.
	Pools            map[string]int
	PoolMax          int
	PoolRefillPerSec float64
	// VolumeMinFreeMB is the free space the volumes' disk keeps above every volume filled:
	// a volume that would not fit is refused (507). 1024 when 0, none when negative.
	VolumeMinFreeMB int
	// BaseTemplate is built on first run when missing, unless NoBuild.
	NoBuild bool
	// Mirror is the Debian mirror that first build downloads from (build.ValidMirror);
	// the machine's apt sources when empty.
	Mirror string
	// NoNetwork leaves every sandbox loopback only (allowInternetAccess is reported false);
	// otherwise Network configures their egress (veth, address pool, NAT, DNS, nftables).
	NoNetwork bool
	Network   network.Config
	Logger    *slog.Logger
	// Ready, if set, is called with the listener's address once the server serves.
	Ready func(addr string, apiKey string)

	// RegistryAllow are registries (HOST or HOST:PORT) fromImage pulls may reach whatever
	// they resolve to (loopback, the host's own addresses, past the egress limit).
	RegistryAllow []string

	// Cluster makes the server one node of a cluster (cluster.go); a lone server when its
	// Node is empty.
	Cluster ClusterConfig
	// Objects is the object store templates are shared through (blob.Open's address:
	// s3://BUCKET?endpoint=URL&region=R or file:///DIR); none when empty. ObjectsCacheMB
	// bounds the local cache of an S3 store (1024 when 0).
	Objects        string
	ObjectsCacheMB int64

	// OIDCIssuer is the workload identity issuer's URL, the API's external one (scheme://host);
	// http://<listen address> when empty. OIDCTokenTTL is a token's life (15 min when 0) and
	// OIDCKeyRotation how long a signing key signs (24 h when 0).
	OIDCIssuer      string
	OIDCTokenTTL    time.Duration
	OIDCKeyRotation time.Duration
}

// Paths inside the data dir.
func dbPath(data string) string { return filepath.Join(data, "cove.db") }

// KeyFile holds the API key made on first run, readable by root only.
func KeyFile(data string) string { return filepath.Join(data, "initial-api-key") }

// AdminTokenFile holds the operator's admin token, readable by root only.
func AdminTokenFile(data string) string { return filepath.Join(data, "admin-token") }

// adminToken reads the data dir's admin token, making it on first use.
func adminToken(data string) (string, error) {
	if b, err := os.ReadFile(AdminTokenFile(data)); err == nil && len(trimNL(b)) > 0 {
		return string(trimNL(b)), nil
	}
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	token := "cove_admin_" + hex.EncodeToString(b)
	if err := os.WriteFile(AdminTokenFile(data), []byte(token+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write admin token: %w", err)
	}
	return token, nil
}

// OpenStore opens the store a server on data and state (its --data and --state) keeps its
// records in, with the data dir's vault, which seals the secrets records keep: for CLI verbs
// that work beside a running server.
func OpenStore(ctx context.Context, data, state string) (store.DB, error) {
	db, _, err := openStore(ctx, data, state, nil)
	return db, err
}

// openVault opens the data dir's vault, making the data dir on first run; with key (a
// cluster's, derived from its secret) rather than the data dir's own.
func openVault(data string, key []byte) (*vault.Vault, error) {
	if err := os.MkdirAll(data, 0o700); err != nil {
		return nil, err
	}
	if key != nil {
		return vault.OpenKeyed(filepath.Join(data, "vault"), key)
	}
	return vault.Open(filepath.Join(data, "vault"))
}

// openStore opens the store state names (ParseState) with the data dir's vault sealing the
// secrets its records keep, on either engine; vaultKey, when set, is the cluster's key.
func openStore(ctx context.Context, data, state string, vaultKey []byte) (store.DB, *vault.Vault, error) {
	where, err := ParseState(state)
	if err != nil {
		return nil, nil, err
	}
	kept, err := openVault(data, vaultKey)
	if err != nil {
		return nil, nil, err
	}
	if where.Engine == EnginePostgres {
		db, err := postgres.Open(ctx, where.DSN, postgres.WithSealer(kept))
		if err != nil {
			return nil, nil, fmt.Errorf("--state: %w", err) // err names the address, redacted
		}
		return db, kept, nil
	}
	path := where.Path
	if path == "" {
		path = dbPath(data)
	}
	db, err := sqlite.Open(ctx, path, sqlite.WithSealer(kept))
	if err != nil {
		return nil, nil, fmt.Errorf("--state %s: %w", where, err)
	}
	return db, kept, nil
}

// OpenTemplates opens the template store (templateDir, or the data dir's own when empty)
// and its builder, with a runc runtime for build steps, its records in the data dir's own store (SQLite),
// which stays open for the life of the process (the CLI's).
func OpenTemplates(ctx context.Context, data, templateDir string) (*build.Builder, *runtime.Runc, error) {
	db, _, err := openStore(ctx, data, "", nil)
	if err != nil {
		return nil, nil, fmt.Errorf("the records of the templates: %w", err)
	}
	return openTemplates(ctx, data, templateDir, db, runtime.Config{})
}

// openTemplates is OpenTemplates with the records in records and the runtime configured as
// rc says (its DataDir is the data dir's sandboxes).
func openTemplates(ctx context.Context, data, templateDir string, records store.Templates, rc runtime.Config) (*build.Builder, *runtime.Runc, error) {
	rc.DataDir = filepath.Join(data, "sandboxes")
	rt, err := runtime.NewRunc(ctx, rc)
	if err != nil {
		return nil, nil, err
	}
	if templateDir == "" {
		templateDir = filepath.Join(data, "templates")
	}
	ts, err := template.OpenAt(ctx, templateDir, records)
	if err != nil {
		return nil, nil, err
	}
	return build.New(ts, rt), rt, nil
}

// Run brings Cove up and serves until ctx ends; progress lines go to progress. It is the
// list of steps below, each a small function; what a step opens, it also closes (in
// reverse order, once Run returns).
func Run(ctx context.Context, cfg Config, progress io.Writer) error {
	if err := checkTLSFlags(cfg); err != nil {
		return err
	}
	if _, err := ParseState(cfg.State); err != nil {
		return err
	}
	if err := checkClusterFlags(cfg); err != nil {
		return err
	}
	applyNodeNames(&cfg)
	s := newInstance(cfg, progress)
	defer s.close()
	ctx = telemetry.WithLogger(ctx, s.cfg.Logger)
	for _, step := range []func(context.Context) error{
		s.checkHost,
		s.lockDataDir,
		s.openStore, // before the base template's first build: a database that fails, fails at once
		s.openTemplates,
		s.startLogs,
		s.startEvents,
		s.startNetwork,
		s.startOrchestrator, // and recover the sandboxes of the last run
		s.startCluster,      // join the cluster: lease, sweeps, forwarding (with --node)
		s.startBackground,
		s.listen,
		s.startIdentity,
		s.buildHandlers,
	} {
		if err := step(ctx); err != nil {
			return err
		}
	}
	s.announce()
	return s.serve(ctx)
}

// instance is one run of the server: what its steps opened, for the steps after them.
type instance struct {
	cfg      Config
	progress io.Writer
	say      func(format string, args ...any)
	closers  []func() error // run in reverse by close; their errors are of no use by then

	limitEvents limitEvents // team.limit.reached of the log store and builds (limits.go)

	templates *template.Store
	builder   *build.Builder // builds into templates
	rt        *runtime.Runc
	db        store.DB
	apiKey    string // the first run's key, in clear; "" after the first run
	admin     string
	ingester  *logs.Ingester
	bus       *events.Bus
	secrets   *secrets.Store
	vault     *vault.Vault // seals what the server keeps secret at rest
	netw      orchestrator.Network
	netman    *network.Manager                  // nil with NoNetwork
	denials   atomic.Pointer[netpolicy.Service] // set once the orchestrator exists
	orch      *orchestrator.Orchestrator
	volumes   *volumes.Service   // the volume API (the orchestrator binds them at launch)
	netpolicy *netpolicy.Service // the egress policy API (the orchestrator attaches networks at launch)
	retainer  *retention.Retainer
	builds    *build.Builds
	ln        net.Listener
	dashboard *console.Console
	proxy     *proxy.Proxy
	srv       *http.Server
	issuer    *oidc.Issuer
	cluster   *clusterNode // nil on a lone server
	objects   blob.Store   // --objects; nil without
}

// newInstance fills cfg's defaults.
func newInstance(cfg Config, progress io.Writer) *instance {
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:3000"
	}
	if cfg.DataDir == "" {
		cfg.DataDir = "/var/lib/cove"
	}
	if cfg.Logger == nil {
		cfg.Logger = telemetry.NewLogger(os.Stderr, slog.LevelInfo)
	}
	if progress == nil {
		progress = io.Discard
	}
	return &instance{cfg: cfg, progress: progress, say: func(format string, args ...any) { fmt.Fprintf(progress, "==> "+format+"\n", args...) }}
}

// onClose runs f when Run returns, before what earlier steps opened is closed.
func (s *instance) onClose(f func() error) { s.closers = append(s.closers, f) }

func (s *instance) close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		_ = s.closers[i]()
	}
}

// checkHost needs root and installs the Debian packages sandboxes need.
func (s *instance) checkHost(ctx context.Context) error {
	if os.Geteuid() != 0 {
		return errors.New("cove server runs sandboxes with runc and needs root")
	}
	pkgs := []string{"runc", "debootstrap", "e2fsprogs"}
	if !s.cfg.NoNetwork {
		pkgs = append(pkgs, "nftables") // the nft binary: sandbox egress rules
	}
	s.say("checking host packages (%s)", strings.Join(pkgs, ", "))
	if err := build.EnsureHostPackages(ctx, pkgs...); err != nil {
		return fmt.Errorf("install host packages: %w", err)
	}
	return nil
}

// lockDataDir makes the data dir, owner only, and takes it for this server alone.
func (s *instance) lockDataDir(context.Context) error {
	if err := os.MkdirAll(s.cfg.DataDir, 0o700); err != nil {
		return err
	}
	// The data dir holds envd tokens and webhook secrets: only its owner may look inside,
	// also when it existed before with looser modes.
	if err := os.Chmod(s.cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("data dir %s: %w", s.cfg.DataDir, err)
	}
	lock, err := LockDataDir(s.cfg.DataDir)
	if err != nil {
		return err
	}
	s.onClose(lock.Release)
	return nil
}

// openTemplates opens the runtime and the template store, building the base template on
// first run.
func (s *instance) openTemplates(ctx context.Context) error {
	rc := runtime.Config{LazyRestore: s.cfg.LazyRestore}
	if s.cfg.Cluster.on() {
		rc, _, _ = nodeNames(s.cfg.Cluster.Node)
		rc.LazyRestore = s.cfg.LazyRestore
	}
	rc.DefaultEngine = s.cfg.Runtime
	templates, rt, err := openTemplates(ctx, s.cfg.DataDir, s.cfg.TemplateDir, s.db, rc)
	if err != nil {
		return fmt.Errorf("runtime: %w", err)
	}
	s.templates, s.builder, s.rt = templates.Store, templates, rt
	if s.cfg.Objects != "" {
		objects, err := blob.Open(ctx, s.cfg.Objects, s.cfg.DataDir, cmp.Or(s.cfg.ObjectsCacheMB, 1024)<<20)
		if err != nil {
			return fmt.Errorf("--objects: %w", err)
		}
		templates.SetReplica(&template.Replica{Blobs: objects, Logger: s.cfg.Logger})
		s.objects = objects
		s.say("templates shared through the object store %s", redactObjects(s.cfg.Objects))
	}
	telemetry.WatchDisk("data", s.cfg.DataDir)
	telemetry.WatchDisk("templates", templates.Dir())
	base, err := templates.Get(shipped.BaseName)
	if err == nil && base.Key != shipped.BaseKey() {
		s.say("the base template was built from another definition than this cove's (key %q, this cove's %q): "+
			"`cove template build base --replace` rebuilds it from the current one, reusing the steps that did not change",
			base.Key, shipped.BaseKey())
	}
	if errors.Is(err, template.ErrNotFound) && !s.cfg.NoBuild {
		s.say("building the base template from templates/base (Debian bookworm, about a minute, first run only)")
		begun := time.Now()
		if s.cfg.Mirror != "" {
			s.say("debian from the mirror %s", s.cfg.Mirror)
		}
		spec, err := shipped.BaseSpec(templates, shipped.BaseName, s.cfg.Mirror)
		if err != nil {
			return fmt.Errorf("build base template: %w", err)
		}
		if _, err := templates.Build(ctx, spec, s.progress); err != nil {
			return fmt.Errorf("build base template: %w", err)
		}
		s.say("base template ready in %s", time.Since(begun).Round(time.Second))
	}
	return nil
}

// openStore opens the store (SQLite or PostgreSQL, by State), making the first team, API
// key and admin token on first run.
func (s *instance) openStore(ctx context.Context) error {
	var vaultKey []byte
	if s.cfg.Cluster.on() {
		// Every node seals with the cluster's key: each opens what another sealed.
		secret, err := readClusterSecret(s.cfg.Cluster.SecretFile)
		if err != nil {
			return err
		}
		if vaultKey, err = clusterKey(secret, "vault"); err != nil {
			return err
		}
	}
	db, kept, err := openStore(ctx, s.cfg.DataDir, s.cfg.State, vaultKey)
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	if where, _ := ParseState(s.cfg.State); where.Engine == EnginePostgres {
		s.say("state in PostgreSQL at %s", where)
	}
	s.db, s.vault = db, kept
	s.onClose(db.Close)
	// The vault's sets live in the store from now on (those of a release before are moved
	// in): every node reads a sandbox's wherever it moves; each lists and prunes its own.
	if err := kept.KeepIn(ctx, db, s.cfg.Cluster.Node); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	if s.apiKey, err = firstRunKey(ctx, db, s.cfg.DataDir); err != nil {
		return err
	}
	s.admin, err = adminToken(s.cfg.DataDir)
	return err
}

// startLogs starts the log ingester and tees the server's own logger into it.
func (s *instance) startLogs(context.Context) error {
	s.ingester = logs.NewIngester(s.db, logs.Config{Logger: s.cfg.Logger, MaxBytesPerHourPerTeam: s.cfg.LogTeamBytesPerHour,
		DataDir: s.cfg.DataDir, MinFreeBytes: s.cfg.LogMinFreeMB << 20, OnLimit: s.limitEvents.logLimit})
	s.onClose(s.ingester.Close)
	// From here on, the server's own lines about a sandbox also go to the log store, so a
	// request's timeline shows the API's, proxy's and orchestrator's steps beside envd's.
	db := s.db
	add := s.ingester.Add
	if node := s.cfg.Cluster.Node; node != "" {
		// Every line a node stores says which node logged it: a request's timeline across
		// nodes (cove trace, the console's waterfall) shows each hop's node.
		add = func(l store.LogLine) {
			if l.Fields == nil {
				l.Fields = map[string]any{}
			}
			if _, ok := l.Fields[telemetry.KeyNode]; !ok {
				l.Fields[telemetry.KeyNode] = node
			}
			s.ingester.Add(l)
		}
	}
	s.cfg.Logger = slog.New(trace.Tee(s.cfg.Logger.Handler(), add, newTeamOf(db).team))
	return nil
}

// teamOf answers the tee's question, the team of a sandbox a line names without one, from
// the store once per sandbox: a sandbox's team never changes, and a proxied stream's lines
// asked the database once each.
type teamOf struct {
	db store.Sandboxes
	mu sync.Mutex
	m  map[string]string
}

// maxTeamsKnown bounds the map; past it, it starts again.
const maxTeamsKnown = 100_000

func newTeamOf(db store.Sandboxes) *teamOf { return &teamOf{db: db, m: map[string]string{}} }

func (t *teamOf) team(id string) string {
	t.mu.Lock()
	team, ok := t.m[id]
	t.mu.Unlock()
	if ok {
		return team
	}
	sb, err := t.db.GetSandbox(context.Background(), id)
	if err != nil {
		return "" // not recorded yet (a create's first lines), or gone: asked again next time
	}
	t.mu.Lock()
	if len(t.m) >= maxTeamsKnown {
		clear(t.m)
	}
	t.m[id] = sb.TeamID
	t.mu.Unlock()
	return sb.TeamID
}

// startEvents starts the lifecycle event bus and its webhook deliveries.
func (s *instance) startEvents(ctx context.Context) error {
	// Built after the tee so webhook delivery lines about a sandbox reach `cove trace`.
	bus, err := events.New(ctx, events.Config{
		Store: s.db, Logger: s.cfg.Logger, AllowNets: s.cfg.WebhookAllowNets,
	})
	if err != nil {
		return fmt.Errorf("events: %w", err)
	}
	s.bus = bus
	s.limitEvents.start(bus, s)
	s.onClose(func() error { bus.Close(); return nil })
	return nil
}

// startNetwork opens the secret store (moving an older release's secrets.json into the
// store) and, unless NoNetwork, sets up sandbox egress.
func (s *instance) startNetwork(ctx context.Context) error {
	secretStore, err := secrets.Open(ctx, s.db, s.vault, filepath.Join(s.cfg.DataDir, "secrets.json"))
	if err != nil {
		return err
	}
	s.secrets = secretStore
	if s.cfg.NoNetwork {
		return nil
	}
	s.cfg.Network.Logger = s.cfg.Logger
	if s.cfg.Network.RecordDir == "" {
		// The interception CA, and where an older release kept the allocation records.
		s.cfg.Network.RecordDir = filepath.Join(s.cfg.DataDir, "network")
	}
	// A restart re-claims its sandboxes' networks (network.Allocation) from this node's records.
	s.cfg.Network.Records, s.cfg.Network.Node = s.db, s.cfg.Cluster.Node
	s.cfg.Network.SecretValue = secretStore.Value
	s.cfg.Network.Keeper = s.vault // the egress CA's key: derived from the vault's, one for a cluster
	s.cfg.Network.OnDenied = func(ctx context.Context, d egress.Denied) {
		if buildDenied(ctx, s.builder, s.bus, s.cfg.Logger, d) {
			return
		}
		if p := s.denials.Load(); p != nil {
			p.NetworkDenied(ctx, d)
		}
	}
	m, err := network.New(ctx, s.cfg.Network)
	if err != nil {
		return fmt.Errorf("%w (or run with --network=false: sandboxes get no egress)", err)
	}
	s.onClose(func() error { return m.Close(context.Background()) }) // after the sandboxes are gone: removes the table
	s.netw, s.netman = m, m
	return nil
}

// startOrchestrator opens the snapshot and volume stores, builds the orchestrator and
// adopts (or cleans up after) the sandboxes of the last run.
func (s *instance) startOrchestrator(ctx context.Context) error {
	// Their records are in the store, keyed by this node: their files are on its disk.
	snapshots, err := snapshot.Open(ctx, filepath.Join(s.cfg.DataDir, "snapshots"), s.db, s.cfg.Cluster.Node)
	if err != nil {
		return err
	}
	volStore, err := snapshot.OpenVolumes(ctx, filepath.Join(s.cfg.DataDir, "volumes"), s.db, s.cfg.Cluster.Node)
	if err != nil {
		return err
	}
	s.shareVolumes(ctx, volStore)
	kept := s.vault
	cfg := s.cfg
	// envd's binary is bound into every sandbox from a tmpfs copy: the bind names no path of
	// the host's (runtime.StageBinary).
	if cfg.CoveBinary == "" {
		if cfg.CoveBinary, err = os.Executable(); err != nil {
			return fmt.Errorf("find the cove binary: %w", err)
		}
	}
	if staged, err := runtime.StageBinary(cfg.CoveBinary); err != nil {
		cfg.Logger.Warn("envd's binary is bound from its host path", telemetry.KeyError, err.Error())
	} else {
		cfg.CoveBinary = staged
	}
	orch, err := orchestrator.New(orchestrator.Config{
		Store: s.db, Runtime: s.rt, Templates: s.templates, Events: s.bus,
		Logs: s.ingester, Commands: s.db, Redactor: redact.New(redact.Options{Secrets: []string{s.admin}}), EnvdArgs: envdArgs(cfg), Collect: cfg.Collect, CollectBudgets: cfg.CollectBudgets, Quotas: cfg.Quotas, DiskSizeMB: cfg.DiskSizeMB,
		LogDir: filepath.Join(cfg.DataDir, "logs"), Logger: cfg.Logger, CoveBinary: cfg.CoveBinary, PauseKind: cfg.PauseKind, MemoryMB: cfg.SandboxMemoryMB,
		Snapshots: snapshots, Volumes: volStore, HostFilesFreePercent: cfg.HostFilesFreePercent, Network: s.netw, Vault: kept,
		Pools: cfg.Pools, PoolSizes: s.db, PoolMax: cfg.PoolMax, PoolRefillPerSec: cfg.PoolRefillPerSec,
		Node: cfg.Cluster.Node, Placement: placement(cfg, s.db), Mover: s.mover(), Engine: string(cfg.Runtime),
	})
	if err != nil {
		return err
	}
	s.orch = orch
	// The volume API is a service of its own over the same store; the orchestrator tells it
	// which sandboxes still hold their mounts.
	s.volumes = volumes.New(volumes.Config{Store: volStore, Sandboxes: orch, SizeMB: cfg.VolumeSizeMB, FreeFloorMB: cfg.VolumeMinFreeMB,
		Quota: func(team string) volumes.Quota {
			q := cfg.Quotas.For(team)
			return volumes.Quota{Volumes: q.Volumes, MB: q.VolumeMB}
		},
		Limits: events.NewLimits(s.bus, cfg.Logger)})
	// So is the sandboxes' egress policy, over the network that enforces it.
	s.netpolicy = netpolicy.New(netpolicy.Config{Network: s.netw, Sandboxes: orch, Events: s.bus, Logger: cfg.Logger})
	s.denials.Store(s.netpolicy)
	s.builder.SetStartSnapshotter(orch) // builds with a start command snapshot it once ready
	return orch.Recover(ctx)
}

// startBackground starts the resource sampler, the retention sweeps and the template
// builds.
func (s *instance) startBackground(ctx context.Context) error {
	samplesTTL := policies(s.cfg)[store.DatasetSamples].TTL // the sampler prunes too: the same TTL
	if samplesTTL <= 0 {
		samplesTTL = 100 * 365 * 24 * time.Hour
	}
	smp, err := sampler.New(sampler.Config{Source: sampleSource{orch: s.orch, rt: s.rt}, Store: s.db, Logger: s.cfg.Logger, Interval: s.cfg.SampleInterval, Retention: samplesTTL})
	if err != nil {
		return err
	}
	go func() { _ = smp.Run(ctx) }()
	s.onClose(smp.Close)
	builds, err := build.OpenBuilds(ctx, s.builder, s.db, s.cfg.DataDir, s.cfg.Cluster.Node)
	if err != nil {
		return fmt.Errorf("template builds: %w", err)
	}
	s.onClose(func() error { builds.Close(); return nil })
	sb := buildSandbox(s.cfg, s.netw, stepGuard{reserve: s.orch.ReserveBuildStep, timeout: s.cfg.BuildStepTimeout,
		note: func(id, line string) { s.builder.StepLog(id, line) }, kill: s.rt.Destroy, logger: s.cfg.Logger,
		limit: func(ctx context.Context, team, detail string) {
			s.limitEvents.reached(ctx, team, "", "", cove.LimitBuildStepTime, detail)
		}})
	sb.OnTimeLimit = func(team, why string) {
		s.limitEvents.reached(context.Background(), team, "", "", cove.LimitBuildTime, why)
	}
	builds.SetSandbox(sb)
	s.builds = builds
	s.retainer = retention.New(retention.Config{Store: s.db, Files: buildRetention(builds, s.templates), Policies: policies(s.cfg), Logger: s.cfg.Logger})
	go s.retainer.Run(ctx)
	return nil
}

// listen opens the one port every edge serves on.
func (s *instance) listen(context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", s.cfg.Addr, err)
	}
	s.ln = ln
	return nil
}

// buildHandlers builds the edges (the API with its team APIs, the proxy, /metrics and the
// console) and the HTTP server over them.
func (s *instance) buildHandlers(context.Context) error {
	domain := s.cfg.Domain
	if domain == "" && s.cfg.tlsOn() {
		domain = DefaultTLSDomain + portSuffix(s.ln.Addr())
	}
	proxyDomain, sandboxDomain := SandboxDomains(domain, s.ln.Addr())
	apiHandler := api.New(api.Config{Sandboxes: s.orch, Durable: s.orch, Volumes: s.volumes, Networks: s.netpolicy, Pools: s.orch, Secrets: s.secrets, Keys: s.db, Activity: s.db, Domain: sandboxDomain, Logger: s.cfg.Logger, AdminToken: s.admin, Builds: s.builds,
		Routes:   append(s.teamRoutes(), s.adminRoutes()...),
		Identity: s.issuer})
	px := proxy.New(proxy.Config{Backend: s.orch, Domain: proxyDomain, Logger: s.cfg.Logger})
	s.proxy = px
	if s.cluster != nil {
		s.cluster.sandboxOf = px.SandboxID
	}
	// A team's series (its id in the team label) only to its own key or the admin token.
	metrics := api.MetricsHandler(api.MetricsConfig{Gatherer: telemetry.WithNode(telemetry.Metrics(), s.cfg.Cluster.Node), Keys: s.db, AdminToken: s.admin, Logger: s.cfg.Logger})
	var nodes store.Nodes // the console's nodes page, on a cluster node
	if s.cluster != nil {
		nodes = s.cluster.nodes
	}
	s.dashboard = console.New(console.Config{Logger: s.cfg.Logger, Pools: s.orch.Pools, Sandboxes: s.orch, Keys: s.db, Sessions: s.db, Records: buildLogReads{s.db, s.builds}, AdminToken: s.admin, Templates: s.templates, Builds: s.builds, Nodes: nodes})
	var internal http.Handler // the routes between a cluster's nodes
	if s.cluster != nil {
		internal = s.internalEdge()
	}
	// Every edge serves through the one chain (httpx.Chain: request id, access line,
	// recovery, its own authentication, error mapping): the API with its team routes, the
	// proxy, the console, /metrics and the routes between nodes. The request id and recovery
	// outside them guard the one step no edge owns: a cluster node forwarding a request to
	// the node that answers it (and logs its access line).
	root := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case internal != nil && strings.HasPrefix(r.URL.Path, "/cluster/"):
			internal.ServeHTTP(w, r)
		case s.cluster != nil && px.Match(r):
			s.cluster.serve(w, r, true, px)
		case px.Match(r):
			px.ServeHTTP(w, r)
		case s.cluster != nil && clusterPath(r.URL.Path):
			s.cluster.serve(w, r, false, apiHandler)
		case strings.HasPrefix(r.URL.Path, console.Prefix):
			s.dashboard.ServeHTTP(w, r)
		case r.URL.Path == "/metrics" && r.Method == http.MethodGet:
			metrics.ServeHTTP(w, r)
		default:
			apiHandler.ServeHTTP(w, r)
		}
	})
	handler := httpx.RequestIDs(s.cfg.Logger, httpx.Recover(telemetry.TraceHTTP(root)))
	s.srv = &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	s.srv.Protocols = new(http.Protocols)
	s.srv.Protocols.SetHTTP1(true)
	s.srv.Protocols.SetUnencryptedHTTP2(true)
	if s.cfg.tlsOn() {
		tlsConfig, err := serverTLS(s.cfg, proxyDomain, s.ln.Addr())
		if err != nil {
			return err
		}
		s.srv.TLSConfig = tlsConfig
		s.srv.Protocols.SetHTTP2(true)
	}
	return nil
}

// teamRoutes are the team routes (events and webhooks, metrics, logs and commands, traces),
// entries of the API's route table behind its authentication.
func (s *instance) teamRoutes() []httpx.Route {
	reads := buildLogReads{s.db, s.builds}
	return teamroutes.Routes(teamroutes.Config{
		Events: s.db, AllowNets: s.cfg.WebhookAllowNets,
		Logs: reads, Commands: s.db, LogSandbox: s.sandboxLogsReadable, Labels: s.sandboxLabels,
		Metrics: s.db, MetricSandbox: s.sandboxMetricsReadable,
		Traces: reads,
	})
}

// sandboxLogsReadable returns the template of sandbox (or template build) id when team may
// read its logs and commands.
func (s *instance) sandboxLogsReadable(ctx context.Context, team, id string) (string, error) {
	// A killed sandbox's logs and commands stay readable; another team's are not found.
	sb, err := s.orch.Get(ctx, team, id)
	var gone *orchestrator.GoneError
	switch {
	case err == nil:
		return sb.TemplateID, nil
	case errors.As(err, &gone):
		return "", nil
	case errors.Is(err, orchestrator.ErrNotFound):
		// A template build's log reads like a sandbox's, by the build id.
		if rec, berr := s.builds.Get(id); berr == nil && rec.TeamID == team {
			return rec.Template, nil
		}
		return "", store.ErrNotFound
	}
	return "", err
}

// sandboxLabels is sandbox id's metadata, joined onto its log lines.
func (s *instance) sandboxLabels(ctx context.Context, team, id string) (map[string]string, error) {
	sb, err := s.db.GetSandbox(ctx, id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && sb.TeamID != team) {
		return nil, nil // checked by Sandbox: a sandbox without a record has no labels
	}
	if err != nil {
		return nil, err
	}
	return sb.Metadata, nil
}

// sandboxMetricsReadable returns nil when team may read sandbox id's samples.
func (s *instance) sandboxMetricsReadable(ctx context.Context, team, id string) error {
	// A killed sandbox's samples stay readable; another team's sandbox is not found.
	_, err := s.orch.Get(ctx, team, id)
	var gone *orchestrator.GoneError
	switch {
	case err == nil, errors.As(err, &gone):
		return nil
	case errors.Is(err, orchestrator.ErrNotFound):
		return store.ErrNotFound
	}
	return err
}

// announce prints where Cove is and how the SDK reaches it, and calls cfg.Ready.
func (s *instance) announce() {
	url := "http://" + s.ln.Addr().String()
	if s.cfg.tlsOn() {
		url = "https://" + s.ln.Addr().String()
	}
	if s.cfg.TLSSelfSigned {
		ca := CAFile(s.cfg.DataDir)
		s.say("TLS with a self-signed CA: trust %s (NODE_EXTRA_CA_CERTS=%s, curl --cacert %s)", ca, ca, ca)
	}
	s.say("Cove is up at %s", url)
	if s.apiKey != "" {
		s.say("point the E2B SDK at it:\n    export E2B_API_URL=%s E2B_SANDBOX_URL=%s E2B_API_KEY=%s", url, url, s.apiKey)
	} else {
		s.say("point the E2B SDK at it: export E2B_API_URL=%s E2B_SANDBOX_URL=%s E2B_API_KEY=<a key from `cove apikey create`, or %s>", url, url, KeyFile(s.cfg.DataDir))
	}
	s.cfg.Logger.Info("cove server listening", telemetry.KeyAddr, s.ln.Addr().String(), telemetry.KeyDataDir, s.cfg.DataDir)
	if s.cfg.Ready != nil {
		key := s.apiKey
		if key == "" {
			if b, err := os.ReadFile(KeyFile(s.cfg.DataDir)); err == nil {
				key = string(trimNL(b))
			}
		}
		s.cfg.Ready(s.ln.Addr().String(), key)
	}
}

// serve serves until ctx ends or the server fails, then stops the sandboxes (OnStop) and
// the server.
func (s *instance) serve(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() {
		if s.srv.TLSConfig != nil {
			errc <- s.srv.ServeTLS(s.ln, "", "")
			return
		}
		errc <- s.srv.Serve(s.ln)
	}()
	select {
	case err := <-errc:
		stop(context.Background(), s.orch, s.cfg.OnStop)
		return err
	case <-ctx.Done():
	}
	s.cfg.Logger.Info("cove server stopping", telemetry.KeyOnStop, s.cfg.OnStop.String())
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s.proxy.Shutdown()               // open streams end naming the stop, not with a cut envelope
	stop(sctx, s.orch, s.cfg.OnStop) // either way, the sandboxes' streams through the proxy end
	s.dashboard.Close()              // ends the console's live streams
	_ = s.srv.Shutdown(sctx)
	return nil
}

// envdArgs passes the server's record caps on to every sandbox's envd.
func envdArgs(cfg Config) []string {
	var args []string
	if cfg.RecordHeadBytes > 0 {
		args = append(args, "--record-head-bytes", strconv.Itoa(cfg.RecordHeadBytes))
	}
	if cfg.RecordTailBytes > 0 {
		args = append(args, "--record-tail-bytes", strconv.Itoa(cfg.RecordTailBytes))
	}
	return args
}

// policies are the retention policies: the defaults, --retention for log lines and command
// records, then the operator's per-dataset ones.
func policies(cfg Config) map[store.Dataset]retention.Policy {
	pol := retention.Defaults()
	if cfg.Retention > 0 {
		for _, d := range []store.Dataset{store.DatasetLogs, store.DatasetCommands} {
			p := pol[d]
			p.TTL = cfg.Retention
			pol[d] = p
		}
	}
	for d, p := range cfg.Retain {
		pol[d] = p
	}
	return pol
}

// sampleSource tells the resource sampler which sandboxes run and where their cgroup,
// network namespace and overlay upper dir are.
type sampleSource struct {
	orch *orchestrator.Orchestrator
	rt   *runtime.Runc
}

func (s sampleSource) Live() []sampler.Target {
	running := s.orch.Running()
	out := make([]sampler.Target, 0, len(running))
	for _, sb := range running {
		out = append(out, sampler.Target{ID: sb.ID, TeamID: sb.TeamID, CPUCount: sb.CPUCount,
			DiskTotal: uint64(sb.DiskSizeMB) << 20, CgroupPath: s.rt.CgroupPath(sb.ID),
			NetnsPath: s.rt.NetnsPath(sb.ID), UpperDir: s.rt.UpperDir(sb.ID)})
	}
	return out
}

// firstRunKey makes the default team and its first API key when the store has no team, and
// returns the key in clear (once), keeping a root-only copy in the data dir.
func firstRunKey(ctx context.Context, db store.Keys, data string) (string, error) {
	teams, err := db.ListTeams(ctx)
	if err != nil {
		return "", fmt.Errorf("store: %w", err)
	}
	if len(teams) > 0 {
		return "", nil
	}
	team, err := db.CreateTeam(ctx, "default")
	if err != nil {
		return "", fmt.Errorf("create default team: %w", err)
	}
	key, _, err := db.CreateAPIKey(ctx, team.ID, "initial")
	if err != nil {
		return "", fmt.Errorf("create first API key: %w", err)
	}
	if err := os.WriteFile(KeyFile(data), []byte(key+"\n"), 0o600); err != nil {
		return "", err
	}
	return key, nil
}

func trimNL(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

// SandboxDomains returns the domain the proxy routes {port}-{id}.{domain} Hosts by, and the
// domain create and info report (what the SDKs' getHost(port) builds on). Without a
// configured domain, sandbox hosts are {port}-{id}.localhost on the server's own port: they
// work out of the box on the machine Cove runs on, since curl and browsers send every
// *.localhost name to loopback.
//
// A configured domain may end in :port (the port the SDKs' hosts name when it is not the
// scheme's default); the proxy routes by the name alone.
func SandboxDomains(configured string, addr net.Addr) (proxyDomain, sandboxDomain string) {
	if configured != "" {
		if host, _, err := net.SplitHostPort(configured); err == nil {
			return host, configured
		}
		return configured, configured
	}
	port := ""
	if tcp, ok := addr.(*net.TCPAddr); ok {
		port = strconv.Itoa(tcp.Port)
	}
	if port == "" {
		return "localhost", "localhost"
	}
	return "localhost", "localhost:" + port
}

// portSuffix is ":port" of a TCP address, or "".
func portSuffix(addr net.Addr) string {
	if tcp, ok := addr.(*net.TCPAddr); ok {
		return ":" + strconv.Itoa(tcp.Port)
	}
	return ""
}
