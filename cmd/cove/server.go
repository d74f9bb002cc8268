package main

import (
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/cove-dev/cove/internal/envd/envdapi"
	"github.com/cove-dev/cove/internal/server"
	"github.com/cove-dev/cove/internal/telemetry"
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

func newServerCmd() *cobra.Command {
	var cfg server.Config
	var logLevel, otelEndpoint, budgetsFile string
	var netFlags networkFlags
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run Cove: the E2B-compatible REST API, the sandbox proxy and /metrics on one port",
		Long: `cove server brings Cove up on this machine. On first run it installs the Debian packages
it needs (runc, debootstrap), builds the base template from Debian bookworm (about a minute,
progress shown), creates a team and an API key, and prints how to point the E2B SDK at it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var level slog.Level
			if err := level.UnmarshalText([]byte(logLevel)); err != nil {
				return fmt.Errorf("--log-level: %w", err)
			}
			cfg.Logger = telemetry.NewLogger(os.Stderr, level).With("service", "server")
			stopOTel, err := startOTel(cmd.Context(), otelEndpoint, "cove-server")
			if err != nil {
				return fmt.Errorf("--otel-endpoint: %w", err)
			}
			defer stopOTel()
			if budgetsFile != "" {
				f, err := os.Open(budgetsFile)
				if err != nil {
					return fmt.Errorf("--collect-budgets: %w", err)
				}
				cfg.CollectBudgets, err = envdapi.ParseBudgets(f)
				f.Close()
				if err != nil {
					return fmt.Errorf("--collect-budgets %s: %w", budgetsFile, err)
				}
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
	f.StringVar(&cfg.TemplateDir, "templates", envOr("COVE_TEMPLATES", ""), "template store directory; <data>/templates when empty [$COVE_TEMPLATES]")
	f.StringVar(&cfg.Domain, "domain", envOr("COVE_DOMAIN", ""), "domain for {port}-{id}.{domain} sandbox hosts [$COVE_DOMAIN]")
	f.DurationVar(&cfg.SampleInterval, "sample-interval", 5*time.Second, "how often each sandbox's CPU, memory, disk and network are sampled")
	f.DurationVar(&cfg.Retention, "retention", 7*24*time.Hour, "how long log lines and ended command records are kept")
	f.IntVar(&cfg.RecordHeadBytes, "record-head-bytes", 4096, "bytes of each command's stdout and stderr its record keeps from the start")
	f.IntVar(&cfg.RecordTailBytes, "record-tail-bytes", 4096, "bytes of each command's stdout and stderr its record keeps from the end")
	f.IntVar(&cfg.Collect.LinesPerSec, "collect-lines-per-sec", 5000, "output lines per second each sandbox's envd collects; past it lines are dropped and counted")
	f.Int64Var(&cfg.Collect.BytesPerSec, "collect-bytes-per-sec", 1<<20, "output bytes per second each sandbox's envd collects as log lines; past it output is dropped and counted")
	f.Int64Var(&cfg.Collect.ByteBurst, "collect-byte-burst", 16<<20, "output bytes a sandbox's envd collects at once before collect-bytes-per-sec applies")
	f.Int64Var(&cfg.Collect.CommandBytes, "collect-command-bytes", 64<<20, "output bytes collected per stream of one command; its record's head and tail are kept past it")
	f.StringVar(&budgetsFile, "collect-budgets", "", `JSON file of collection budgets per team and template id: {"teams":{"<id>":{"bytes_per_sec":N,"byte_burst":N,"command_bytes":N,"lines_per_sec":N}},"templates":{...}}`)
	f.BoolVar(&cfg.NoBuild, "no-build", false, "do not build the base template on first run")
	f.StringVar(&logLevel, "log-level", envOr("COVE_LOG_LEVEL", "info"), "debug, info, warn or error [$COVE_LOG_LEVEL]")
	otelFlag(cmd, &otelEndpoint)
	netFlags.register(cmd)
	return cmd
}
