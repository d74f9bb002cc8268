// Package server composes `cove server`: the REST API, the proxy and /metrics on one port,
// over the orchestrator, the runc runtime, the template store and the SQLite store.
//
// The one idea: first run on a bare Debian machine must just work. Run installs the Debian
// packages it needs, builds the base template with its progress shown, creates a team and an
// API key, and prints the two environment variables the official E2B SDK needs.
package server

import (
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
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cove-dev/cove/internal/api"
	"github.com/cove-dev/cove/internal/console"
	"github.com/cove-dev/cove/internal/envd/envdapi"
	"github.com/cove-dev/cove/internal/events"
	"github.com/cove-dev/cove/internal/httpx"
	"github.com/cove-dev/cove/internal/logs"
	"github.com/cove-dev/cove/internal/network"
	"github.com/cove-dev/cove/internal/orchestrator"
	"github.com/cove-dev/cove/internal/proxy"
	"github.com/cove-dev/cove/internal/redact"
	"github.com/cove-dev/cove/internal/retention"
	"github.com/cove-dev/cove/internal/runtime"
	"github.com/cove-dev/cove/internal/sampler"
	"github.com/cove-dev/cove/internal/secrets"
	"github.com/cove-dev/cove/internal/snapshot"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/store/sqlite"
	"github.com/cove-dev/cove/internal/telemetry"
	"github.com/cove-dev/cove/internal/template"
	"github.com/cove-dev/cove/internal/trace"
	"github.com/cove-dev/cove/reason"
)

// Config configures Run.
type Config struct {
	Addr    string // listen address; 127.0.0.1:3000 by default
	DataDir string // state, templates, sandboxes and logs; /var/lib/cove by default
	Domain  string // sandbox host domain for {port}-{id}.{domain} routing; "" disables it
	// TemplateDir is the template store; <DataDir>/templates when empty.
	TemplateDir string
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
	// BaseTemplate is built on first run when missing, unless NoBuild.
	NoBuild bool
	// NoNetwork leaves every sandbox loopback only (allowInternetAccess is reported false);
	// otherwise Network configures their egress (veth, address pool, NAT, DNS, nftables).
	NoNetwork bool
	Network   network.Config
	Logger    *slog.Logger
	// Ready, if set, is called with the listener's address once the server serves.
	Ready func(addr string, apiKey string)
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

// OpenStore opens the data dir's store, for CLI verbs that work beside a running server.
func OpenStore(ctx context.Context, data string) (*sqlite.DB, error) {
	if err := os.MkdirAll(data, 0o700); err != nil {
		return nil, err
	}
	return sqlite.Open(ctx, dbPath(data))
}

// OpenTemplates opens the template store (templateDir, or the data dir's own when empty)
// with a runc runtime for build steps.
func OpenTemplates(ctx context.Context, data, templateDir string) (*template.Store, *runtime.Runc, error) {
	rt, err := runtime.NewRunc(ctx, runtime.Config{DataDir: filepath.Join(data, "sandboxes")})
	if err != nil {
		return nil, nil, err
	}
	if templateDir == "" {
		templateDir = filepath.Join(data, "templates")
	}
	ts, err := template.OpenAt(templateDir, rt)
	return ts, rt, err
}

// Run brings Cove up and serves until ctx ends; progress lines go to progress.
func Run(ctx context.Context, cfg Config, progress io.Writer) error {
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
	say := func(format string, args ...any) { fmt.Fprintf(progress, "==> "+format+"\n", args...) }
	ctx = telemetry.WithLogger(ctx, cfg.Logger)

	if os.Geteuid() != 0 {
		return errors.New("cove server runs sandboxes with runc and needs root")
	}
	pkgs := []string{"runc", "debootstrap", "e2fsprogs"}
	if !cfg.NoNetwork {
		pkgs = append(pkgs, "nftables") // the nft binary: sandbox egress rules
	}
	say("checking host packages (%s)", strings.Join(pkgs, ", "))
	if err := template.EnsureHostPackages(ctx, pkgs...); err != nil {
		return fmt.Errorf("install host packages: %w", err)
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return err
	}
	// The data dir holds envd tokens and webhook secrets: only its owner may look inside,
	// also when it existed before with looser modes.
	if err := os.Chmod(cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("data dir %s: %w", cfg.DataDir, err)
	}
	lock, err := LockDataDir(cfg.DataDir)
	if err != nil {
		return err
	}
	defer lock.Release()
	templates, rt, err := OpenTemplates(ctx, cfg.DataDir, cfg.TemplateDir)
	if err != nil {
		return fmt.Errorf("runtime: %w", err)
	}
	telemetry.WatchDisk("data", cfg.DataDir)
	telemetry.WatchDisk("templates", templates.Dir())
	base, err := templates.Get("base")
	if err == nil && base.From == "" && base.Key != template.BaseKey(base.Suite) {
		say("the base template was built from another definition than this cove's (key %q, this cove's %q): "+
			"`cove template rm base` and restart to build the current one (with user's passwordless sudo, pip, iproute2)",
			base.Key, template.BaseKey(base.Suite))
	}
	if errors.Is(err, template.ErrNotFound) && !cfg.NoBuild {
		say("building the base template (Debian bookworm, about a minute, first run only)")
		begun := time.Now()
		if _, err := templates.Build(ctx, template.Spec{Name: "base"}, progress); err != nil {
			return fmt.Errorf("build base template: %w", err)
		}
		say("base template ready in %s", time.Since(begun).Round(time.Second))
	}

	db, err := OpenStore(ctx, cfg.DataDir)
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	defer db.Close()
	apiKey, err := firstRunKey(ctx, db, cfg.DataDir)
	if err != nil {
		return err
	}

	admin, err := adminToken(cfg.DataDir)
	if err != nil {
		return err
	}

	ingester := logs.NewIngester(db, logs.Config{Logger: cfg.Logger})
	defer ingester.Close()
	// From here on, the server's own lines about a sandbox also go to the log store, so a
	// request's timeline shows the API's, proxy's and orchestrator's steps beside envd's.
	cfg.Logger = slog.New(trace.Tee(cfg.Logger.Handler(), ingester.Add, func(id string) string {
		if sb, err := db.GetSandbox(context.Background(), id); err == nil {
			return sb.TeamID
		}
		return ""
	}))
	// Built after the tee so webhook delivery lines about a sandbox reach `cove trace`.
	bus, err := events.New(ctx, events.Config{
		Store: db, Logger: cfg.Logger, AllowNets: cfg.WebhookAllowNets,
		Team: func(ctx context.Context) (string, bool) {
			team, _ := telemetry.Caller(ctx)
			return team, team != ""
		},
	})
	if err != nil {
		return fmt.Errorf("events: %w", err)
	}
	defer bus.Close()
	redactor := redact.New(redact.Options{Secrets: []string{admin}})
	secretStore, err := secrets.Open(filepath.Join(cfg.DataDir, "secrets.json"))
	if err != nil {
		return err
	}
	var netw orchestrator.Network
	var denials atomic.Pointer[orchestrator.Orchestrator] // set once the orchestrator exists
	if !cfg.NoNetwork {
		cfg.Network.Logger = cfg.Logger
		cfg.Network.SecretValue = secretStore.Value
		cfg.Network.OnDenied = func(ctx context.Context, d network.Denied) {
			if o := denials.Load(); o != nil {
				o.NetworkDenied(ctx, d)
			}
		}
		m, err := network.New(ctx, cfg.Network)
		if err != nil {
			return fmt.Errorf("%w (or run with --network=false: sandboxes get no egress)", err)
		}
		defer m.Close(context.Background()) // after the sandboxes are gone: removes the table
		netw = m
	}

	snapshots, err := snapshot.Open(filepath.Join(cfg.DataDir, "snapshots"))
	if err != nil {
		return err
	}
	volumes, err := snapshot.OpenVolumes(filepath.Join(cfg.DataDir, "volumes"))
	if err != nil {
		return err
	}
	orch, err := orchestrator.New(orchestrator.Config{
		Store: db, Runtime: rt, Templates: templates, Events: bus,
		Logs: ingester, Commands: db, Redactor: redactor, EnvdArgs: envdArgs(cfg), Collect: cfg.Collect, CollectBudgets: cfg.CollectBudgets, Quotas: cfg.Quotas, DiskSizeMB: cfg.DiskSizeMB,
		LogDir: filepath.Join(cfg.DataDir, "logs"), Logger: cfg.Logger, CoveBinary: cfg.CoveBinary, PauseKind: cfg.PauseKind, MemoryMB: cfg.SandboxMemoryMB,
		Snapshots: snapshots, Volumes: volumes, Network: netw,
	})
	if err != nil {
		return err
	}
	denials.Store(orch)
	templates.SetStartSnapshotter(orch) // builds with a start command snapshot it once ready
	if err := orch.Recover(ctx); err != nil {
		return err
	}
	samplesTTL := policies(cfg)[store.DatasetSamples].TTL // the sampler prunes too: the same TTL
	if samplesTTL <= 0 {
		samplesTTL = 100 * 365 * 24 * time.Hour
	}
	smp, err := sampler.New(sampler.Config{Source: sampleSource{orch: orch, rt: rt}, Store: db, Logger: cfg.Logger, Interval: cfg.SampleInterval, Retention: samplesTTL})
	if err != nil {
		return err
	}
	go func() { _ = smp.Run(ctx) }()
	defer smp.Close()
	retainer := retention.New(retention.Config{Store: db, Policies: policies(cfg), Logger: cfg.Logger})
	go retainer.Run(ctx)
	builds, err := template.OpenBuilds(templates, cfg.DataDir)
	if err != nil {
		return fmt.Errorf("template builds: %w", err)
	}
	defer builds.Close()
	builds.SetLogStore(buildLogSink(ingester), buildLogReader(db))
	logsAPI := logs.NewAPI(logs.APIConfig{Logs: db, Commands: db,
		Team: func(ctx context.Context) (string, bool) { team, _ := telemetry.Caller(ctx); return team, team != "" },
		Sandbox: func(ctx context.Context, team, id string) (string, error) {
			// A killed sandbox's logs and commands stay readable; another team's are not found.
			sb, err := orch.Get(ctx, team, id)
			var gone *orchestrator.GoneError
			switch {
			case err == nil:
				return sb.TemplateID, nil
			case errors.As(err, &gone):
				return "", nil
			case errors.Is(err, orchestrator.ErrNotFound):
				// A template build's log reads like a sandbox's, by the build id.
				if rec, berr := builds.Get(id); berr == nil && rec.TeamID == team {
					return rec.Template, nil
				}
				return "", store.ErrNotFound
			}
			return "", err
		},
		Labels: func(ctx context.Context, team, id string) (map[string]string, error) {
			sb, err := db.GetSandbox(ctx, id)
			if errors.Is(err, store.ErrNotFound) || (err == nil && sb.TeamID != team) {
				return nil, nil // checked by Sandbox: a sandbox without a record has no labels
			}
			if err != nil {
				return nil, err
			}
			return sb.Metadata, nil
		}})
	metricsAPI := sampler.NewAPI(sampler.APIConfig{Store: db,
		Team: func(ctx context.Context) (string, bool) { team, _ := telemetry.Caller(ctx); return team, team != "" },
		Sandbox: func(ctx context.Context, team, id string) error {
			// A killed sandbox's samples stay readable; another team's sandbox is not found.
			_, err := orch.Get(ctx, team, id)
			var gone *orchestrator.GoneError
			switch {
			case err == nil, errors.As(err, &gone):
				return nil
			case errors.Is(err, orchestrator.ErrNotFound):
				return store.ErrNotFound
			}
			return err
		}})

	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Addr, err)
	}
	proxyDomain, sandboxDomain := SandboxDomains(cfg.Domain, ln.Addr())
	apiHandler := api.New(api.Config{Sandboxes: orch, Networks: orch, Secrets: secretStore, Keys: db, Activity: db, Domain: sandboxDomain, Logger: cfg.Logger, AdminToken: admin, Builds: builds,
		Routes: map[string]http.Handler{
			"/events/":                           bus.Handler(),
			"GET /sandboxes/{id}/metrics":        metricsAPI,
			"GET /sandboxes/metrics":             metricsAPI,
			"GET /v2/sandboxes/{id}/logs":        logsAPI,
			"GET /sandboxes/{id}/logs":           logsAPI,
			"GET /sandboxes/{id}/commands":       logsAPI,
			"GET /sandboxes/{id}/commands/{pid}": logsAPI,
			"GET /traces/{requestId}": trace.NewAPI(trace.APIConfig{Store: db,
				Team: func(ctx context.Context) (string, bool) { team, _ := telemetry.Caller(ctx); return team, team != "" }}),
		},
		AdminRoutes: map[string]http.Handler{"GET /admin/status": retainer.Handler()}})
	px := proxy.New(proxy.Config{Backend: orch, Domain: proxyDomain, Logger: cfg.Logger})
	metrics := promhttp.HandlerFor(telemetry.Metrics(), promhttp.HandlerOpts{})
	dashboard := console.New(console.Config{Sandboxes: orch, Keys: db, Sessions: db, Records: db, AdminToken: admin, Templates: templates, Builds: builds})
	root := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case px.Match(r):
			px.ServeHTTP(w, r)
		case strings.HasPrefix(r.URL.Path, console.Prefix):
			dashboard.ServeHTTP(w, r)
		case r.URL.Path == "/metrics" && r.Method == http.MethodGet:
			metrics.ServeHTTP(w, r)
		default:
			apiHandler.ServeHTTP(w, r)
		}
	})
	handler := httpx.RequestIDs(cfg.Logger, httpx.Recover(telemetry.TraceHTTP(root)))

	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)

	url := "http://" + ln.Addr().String()
	say("Cove is up at %s", url)
	if apiKey != "" {
		say("point the E2B SDK at it:\n    export E2B_API_URL=%s E2B_SANDBOX_URL=%s E2B_API_KEY=%s", url, url, apiKey)
	} else {
		say("point the E2B SDK at it: export E2B_API_URL=%s E2B_SANDBOX_URL=%s E2B_API_KEY=<a key from `cove apikey create`, or %s>", url, url, KeyFile(cfg.DataDir))
	}
	cfg.Logger.Info("cove server listening", "addr", ln.Addr().String(), "data_dir", cfg.DataDir)
	if cfg.Ready != nil {
		key := apiKey
		if key == "" {
			if b, err := os.ReadFile(KeyFile(cfg.DataDir)); err == nil {
				key = string(trimNL(b))
			}
		}
		cfg.Ready(ln.Addr().String(), key)
	}

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		stop(context.Background(), orch, cfg.OnStop)
		return err
	case <-ctx.Done():
	}
	cfg.Logger.Info("cove server stopping", "on_stop", cfg.OnStop.String())
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stop(sctx, orch, cfg.OnStop) // either way, the sandboxes' streams through the proxy end
	dashboard.Close()            // ends the console's live streams
	_ = srv.Shutdown(sctx)
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
func firstRunKey(ctx context.Context, db *sqlite.DB, data string) (string, error) {
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
func SandboxDomains(configured string, addr net.Addr) (proxyDomain, sandboxDomain string) {
	if configured != "" {
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
