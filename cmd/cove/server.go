package main

import (
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/cove-dev/cove/internal/builder/template/build"
	"github.com/cove-dev/cove/internal/control/orchestrator"
	"github.com/cove-dev/cove/internal/control/server"
	"github.com/cove-dev/cove/internal/observe/retention"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/sandbox/runtime"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/sdk/envdapi"
	"github.com/cove-dev/cove/sdk/reason"
)

// envOr returns the environment variable's value, or def when it is unset.
func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v
	}
	return def
}

func dataDirFlag(cmd *cobra.Command, p *string) {
	cmd.Flags().StringVar(p, "data", envOr("COVE_DATA", "/var/lib/cove"), "data directory (state, templates, sandboxes, logs) [$COVE_DATA]")
}

// parseFile parses the file a flag names, with errors naming the flag and the file.
func parseFile[T any](flag, path string, parse func(io.Reader) (T, error)) (T, error) {
	f, err := os.Open(path)
	if err != nil {
		var zero T
		return zero, fmt.Errorf("%s: %w", flag, err)
	}
	defer f.Close()
	v, err := parse(f)
	if err != nil {
		return v, fmt.Errorf("%s %s: %w", flag, path, err)
	}
	return v, nil
}

func newServerCmd() *cobra.Command {
	var cfg server.Config
	var logLevel, otelEndpoint, budgetsFile, quotasFile, onStop, pauseKind, engine string
	var webhookAllow, retain, pools []string
	var netFlags networkFlags
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run Cove: the E2B-compatible REST API, the sandbox proxy and /metrics on one port",
		Long: `cove server brings Cove up on this machine. On first run it installs the Debian packages
it needs (runc, debootstrap), builds the base template from its definition (templates/base:
Debian bookworm, about a minute, progress shown), creates a team and an API key, and prints
how to point the E2B SDK at it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var level slog.Level
			if err := level.UnmarshalText([]byte(logLevel)); err != nil {
				return fmt.Errorf("--log-level: %w", err)
			}
			onStopAction, err := server.ParseStopAction(onStop)
			if err != nil {
				return fmt.Errorf("--on-stop: %w", err)
			}
			cfg.OnStop = onStopAction
			if err := build.ValidMirror(cfg.Mirror); err != nil {
				return fmt.Errorf("--mirror: %w", err)
			}
			if cfg.Runtime, err = runtime.ParseEngine(engine); err != nil {
				return fmt.Errorf("--runtime: %w", err)
			}
			if pauseKind != "" {
				if cfg.PauseKind, err = reason.ParsePauseKind(pauseKind); err != nil {
					return fmt.Errorf("--pause: %w (want snapshot or freeze)", err)
				}
			}
			cfg.Logger = telemetry.NewLogger(os.Stderr, level).With(telemetry.KeyService, "server")
			stopOTel, err := startOTel(cmd.Context(), otelEndpoint, "cove-server")
			if err != nil {
				return fmt.Errorf("--otel-endpoint: %w", err)
			}
			defer stopOTel()
			if budgetsFile != "" {
				if cfg.CollectBudgets, err = parseFile("--collect-budgets", budgetsFile, envdapi.ParseBudgets); err != nil {
					return err
				}
			}
			if quotasFile != "" {
				def := cfg.Quotas.Default
				if cfg.Quotas, err = parseFile("--quotas", quotasFile, orchestrator.ParseQuotas); err != nil {
					return err
				}
				if cfg.Quotas.Default == (orchestrator.Quota{}) {
					cfg.Quotas.Default = def // the flags, unless the file sets a default
				}
			}
			if cfg.Pools, err = orchestrator.ParsePools(pools); err != nil {
				return fmt.Errorf("--pool %w", err)
			}
			for _, r := range retain {
				d, p, err := retention.ParseFlag(r)
				if err != nil {
					return fmt.Errorf("--retain %w", err)
				}
				if cfg.Retain == nil {
					cfg.Retain = map[store.Dataset]retention.Policy{}
				}
				cfg.Retain[d] = p
			}
			for _, n := range webhookAllow {
				p, err := netip.ParsePrefix(n)
				if err != nil {
					return fmt.Errorf("--webhook-allow-net %q: want a CIDR range such as 127.0.0.0/8: %w", n, err)
				}
				cfg.WebhookAllowNets = append(cfg.WebhookAllowNets, p)
			}
			if cfg.Network, err = netFlags.config(); err != nil {
				return err
			}
			cfg.NoNetwork = !netFlags.on
			return server.Run(cmd.Context(), cfg, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Addr, "addr", envOr("COVE_ADDR", "127.0.0.1:3000"), "listen address [$COVE_ADDR]")
	dataDirFlag(cmd, &cfg.DataDir)
	f.StringVar(&cfg.State, "state", envOr("COVE_STATE", ""), "where the records live: sqlite (the data dir's cove.db, the default), sqlite:///PATH, or a PostgreSQL 15+ database as postgres://USER[:PASSWORD]@HOST:PORT/DB?sslmode=… (the vault key, templates and snapshots stay in --data) [$COVE_STATE]")
	f.StringVar(&cfg.TemplateDir, "templates", envOr("COVE_TEMPLATES", ""), "template store directory; <data>/templates when empty [$COVE_TEMPLATES]")
	f.StringArrayVar(&cfg.RegistryAllow, "registry-allow", nil, "a registry HOST[:PORT] template builds' fromImage may pull from whatever it resolves to, even loopback or this host (repeatable)")
	f.StringVar(&cfg.Domain, "domain", envOr("COVE_DOMAIN", ""), "domain for {port}-{id}.{domain} sandbox hosts, with :port when clients reach it on another port than 443 (80) [$COVE_DOMAIN]")
	f.StringVar(&cfg.TLSCert, "tls-cert", envOr("COVE_TLS_CERT", ""), "PEM certificate (chain) to serve the API and every sandbox host over TLS and HTTP/2: a wildcard one for *.{domain} [$COVE_TLS_CERT]")
	f.StringVar(&cfg.TLSKey, "tls-key", envOr("COVE_TLS_KEY", ""), "PEM key of --tls-cert [$COVE_TLS_KEY]")
	f.BoolVar(&cfg.TLSSelfSigned, "tls-self-signed", false, "serve TLS with a certificate from a CA made on first run (its key sealed under <data>/tls; <data>/tls/ca.pem is printed, to trust); without --domain, sandbox hosts are {port}-{id}."+server.DefaultTLSDomain)
	f.DurationVar(&cfg.SampleInterval, "sample-interval", 5*time.Second, "how often each sandbox's CPU, memory, disk and network are sampled")
	f.DurationVar(&cfg.Retention, "retention", 7*24*time.Hour, "how long log lines and ended command records are kept")
	f.IntVar(&cfg.RecordHeadBytes, "record-head-bytes", 4096, "bytes of each command's stdout and stderr its record keeps from the start")
	f.IntVar(&cfg.RecordTailBytes, "record-tail-bytes", 4096, "bytes of each command's stdout and stderr its record keeps from the end")
	f.IntVar(&cfg.Collect.LinesPerSec, "collect-lines-per-sec", 5000, "output lines per second each sandbox's envd collects; past it lines are dropped and counted")
	f.Int64Var(&cfg.Collect.BytesPerSec, "collect-bytes-per-sec", 1<<20, "output bytes per second each sandbox's envd collects as log lines; past it output is dropped and counted")
	f.Int64Var(&cfg.Collect.ByteBurst, "collect-byte-burst", 16<<20, "output bytes a sandbox's envd collects at once before collect-bytes-per-sec applies")
	f.Int64Var(&cfg.Collect.CommandBytes, "collect-command-bytes", 64<<20, "output bytes collected per stream of one command; its record's head and tail are kept past it")
	f.StringVar(&budgetsFile, "collect-budgets", "", `JSON file of collection budgets per team and template id: {"teams":{"<id>":{"bytes_per_sec":N,"byte_burst":N,"command_bytes":N,"lines_per_sec":N,"collect":false}},"templates":{...}}`)
	f.IntVar(&cfg.Quotas.Default.Sandboxes, "quota-sandboxes", 0, "running and paused sandboxes a team may hold at once (0: no limit); past it create answers 429")
	f.IntVar(&cfg.Quotas.Default.VCPUs, "quota-vcpus", 0, "vCPUs a team's sandboxes may hold in all (0: no limit)")
	f.IntVar(&cfg.Quotas.Default.MemoryMB, "quota-memory-mb", 0, "memory in MB a team's sandboxes may hold in all (0: no limit)")
	f.Float64Var(&cfg.Quotas.Default.CreatesPerSec, "quota-creates-per-sec", 0, "sandbox creates per second a team may make, in bursts up to its ceiling (0: no limit)")
	f.IntVar(&cfg.Quotas.Default.Volumes, "quota-volumes", 100, "volumes a team may hold (0: no limit); past it a volume create answers 429")
	f.IntVar(&cfg.Quotas.Default.VolumeMB, "quota-volume-mb", 100*1024, "MiB a team's volumes may hold in all, by their sizes (0: no limit); past it a volume create answers 429")
	f.StringVar(&quotasFile, "quotas", "", `JSON file of quotas per team id: {"default":{...},"teams":{"<id>":{"sandboxes":N,"vcpus":N,"memory_mb":N,"creates_per_sec":N,`+
		`"volumes":N,"volume_mb":N,"egress":{"allow_internet_access":false,"allow_out":["CIDR or host"],"deny_out":["CIDR"]}}}} (egress: the network the team's template builds run in)`)
	f.IntVar(&cfg.VolumeSizeMB, "volume-size-mb", 1024, "a new volume's size in MiB when its create does not say (sizeMB): a sparse ext4 image, and writes past it get ENOSPC (content uploads 507); 0: volumes are plain directories without a quota")
	f.IntVar(&cfg.HostFilesFreePercent, "host-files-free-percent", 10, "share of the host's open files (fs.file-max) sandbox creates leave free: below it creates answer 503 (-1: none)")
	f.IntVar(&cfg.VolumeMinFreeMB, "volume-min-free-mb", 1024, "free space in MiB the volumes' disk keeps once every volume is filled: a volume that would not fit is refused with 507 (-1: no floor)")
	f.IntVar(&cfg.DiskSizeMB, "disk-size-mb", 1024, "each sandbox's disk in MiB: an ext4 image of this size holds what it writes, and writes past it get ENOSPC (uploads 507)")
	f.StringArrayVar(&retain, "retain", nil, "a dataset's TTL and size cap, DATASET=TTL[:MAXROWS] (events, webhook_deliveries, metric_samples, command_records, log_lines, build_logs; 0: none); repeatable. Defaults: events 720h:1000000, webhook_deliveries 168h:1000000, metric_samples 24h:5000000, command_records and log_lines --retention:1000000 and :50000000 lines, build_logs 720h:10000 logs")
	f.StringSliceVar(&webhookAllow, "webhook-allow-net", nil, "CIDR ranges webhooks may be delivered to although they are loopback, link-local, private, unique-local or this server's own (refused otherwise); repeatable")
	f.StringArrayVar(&pools, "pool", nil, "keep N started sandboxes of a template ready for creates to claim, TEMPLATE=N (repeatable); `cove template pool` changes a size at runtime and wins")
	f.IntVar(&cfg.PoolMax, "pool-max", orchestrator.DefaultPoolMax, "the most sandboxes one template's warm pool holds")
	f.Float64Var(&cfg.PoolRefillPerSec, "pool-refill-per-sec", 4, "the most sandboxes started a second to refill the warm pools (one at a time)")
	f.StringVar(&engine, "runtime", envOr("COVE_RUNTIME", "runc"), "the engine sandboxes run on: runc (namespaces and cgroups on the host's kernel) or runsc (gVisor: an application kernel in between; bin/runsc beside cove, else PATH) [$COVE_RUNTIME]")
	f.BoolVar(&cfg.LazyRestore, "restore-lazy", true, "resume a snapshot-paused sandbox before all its memory is read back: CRIU's lazy pages serve each page on first touch and the rest in the background (false: read every page first)")
	f.DurationVar(&cfg.BuildTimeout, "build-timeout", 3*time.Hour, "how long a whole template build may run, from its first step to its publish, before it is cancelled and fails with that reason (0: no limit)")
	f.DurationVar(&cfg.BuildStepTimeout, "build-step-timeout", time.Hour, "how long one step of a template build may run before it is killed, failing the build with that reason (0: no limit); running steps also count against the team's sandbox quota")
	f.BoolVar(&cfg.NoBuild, "no-build", false, "do not build the base template on first run")
	f.StringVar(&cfg.Mirror, "mirror", envOr("COVE_MIRROR", ""), "Debian mirror URL the base template's first build downloads from; the machine's apt sources when empty [$COVE_MIRROR]")
	f.StringVar(&pauseKind, "pause", envOr("COVE_PAUSE", ""), "how a pause that does not say pauses: snapshot (processes and memory to disk, RAM freed, survives restarts; needs CRIU 4) or freeze (in RAM); empty: snapshot where CRIU works [$COVE_PAUSE]")
	f.IntVar(&cfg.SandboxMemoryMB, "sandbox-memory-mb", 512, "each sandbox's memory limit in MiB")
	f.Int64Var(&cfg.LogTeamBytesPerHour, "log-team-bytes-per-hour", 2<<30, "log bytes (messages and fields) all of a team's sandboxes may store per hour; past it lines are dropped and counted (-1: no limit)")
	f.Int64Var(&cfg.LogMinFreeMB, "log-min-free-mb", 1024, "free space in MiB the data dir's disk keeps: below it log lines are dropped and counted, not written (-1: no floor)")
	f.StringVar(&onStop, "on-stop", envOr("COVE_ON_STOP", "keep"), "what stopping the server (SIGTERM, SIGINT) does to sandboxes: keep them running for the next start to adopt, or kill them (reason server_shutdown) [$COVE_ON_STOP]")
	f.StringVar(&logLevel, "log-level", envOr("COVE_LOG_LEVEL", "info"), "debug, info, warn or error [$COVE_LOG_LEVEL]")
	f.StringVar(&cfg.Cluster.Node, "node", envOr("COVE_NODE", ""), "join a cluster as this node (1 to 24 of [a-z0-9-]): needs a shared --state postgres://…, --advertise and --cluster-secret-file; host-wide names (nftables table, veth prefix, cgroup parent, runc root) derive from it [$COVE_NODE]")
	f.StringVar(&cfg.Cluster.Advertise, "advertise", envOr("COVE_ADVERTISE", ""), "with --node: the URL the other nodes reach this one's API at, http://HOST:PORT [$COVE_ADVERTISE]")
	f.StringVar(&cfg.Cluster.SecretFile, "cluster-secret-file", envOr("COVE_CLUSTER_SECRET_FILE", ""), "with --node: a file holding the secret every node of the cluster shares (32 bytes or more): it signs requests between nodes and keys the vault [$COVE_CLUSTER_SECRET_FILE]")
	f.IntVar(&cfg.Cluster.MaxSandboxes, "node-max-sandboxes", 200, "with --node: the most sandboxes this node runs; placement sends creates elsewhere past it")
	f.IntVar(&cfg.Cluster.MaxStarts, "node-max-starts", 8, "with --node: the most sandbox starts under way on this node at once")
	f.IntVar(&cfg.Cluster.VCPUs, "node-vcpus", 0, "with --node: the vCPUs this node offers sandboxes, time-shared (0: two per sandbox of --node-max-sandboxes, or 8 per host CPU if more); placement counts each sandbox's against it")
	f.DurationVar(&cfg.Cluster.Lease, "node-lease", 10*time.Second, "with --node: how long one renewal keeps this node alive (renewed every fifth of it); a node whose lease lapses is declared lost and its running sandboxes end with reason node_lost")
	f.StringVar(&cfg.Objects, "objects", envOr("COVE_OBJECTS", ""), "object store a cluster's nodes share templates through: s3://BUCKET?endpoint=URL&region=R (path-style; credentials from the standard AWS variables) or file:///DIR; a template built on one node starts on every node [$COVE_OBJECTS]")
	f.Int64Var(&cfg.ObjectsCacheMB, "objects-cache-mb", 1024, "MiB of the local cache of an S3 --objects store")
	otelFlag(cmd, &otelEndpoint)
	netFlags.register(cmd)
	oidcFlags(cmd, &cfg)
	return cmd
}
