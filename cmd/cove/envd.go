package main

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/internal/guest/envd"
	"github.com/cove-dev/cove/internal/guest/envd/process"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/sdk/envdapi"
)

func newEnvdCmd() *cobra.Command {
	var (
		addr      string
		maxMsg    int
		keepEnded time.Duration
		subreaper bool
		logLevel  string
		collect   string
		head      int
		tail      int
		budget    process.Budget
		cmdBytes  int64
		otelURL   string
	)
	cmd := &cobra.Command{
		Use:   "envd",
		Short: "Run the in-sandbox daemon (E2B envd wire protocol)",
		Long: `envd serves process.Process and filesystem.Filesystem (Connect, gRPC and gRPC-Web)
and HTTP /files, /health, /metrics, /envs and /init. It logs JSON lines to stderr.
Run as PID 1 (or with --subreaper) it reaps orphaned processes.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			envd.LeanRuntime()
			var level slog.Level
			if err := level.UnmarshalText([]byte(logLevel)); err != nil {
				return fmt.Errorf("--log-level: %w", err)
			}
			var logOut io.Writer = os.Stderr
			if os.Getpid() == 1 {
				// Inside a sandbox stdout and stderr are the host's pipes, unread while the
				// server restarts: keep them open, and never let a log line hold a request up.
				envd.HoldHostPipes()
				logOut = envd.NewHostLog(os.Stderr, 4096)
			}
			logger := telemetry.NewLogger(logOut, level).With(telemetry.KeyService, "envd")
			stopOTel, err := startOTel(cmd.Context(), otelURL, "cove-envd")
			if err != nil {
				return fmt.Errorf("--otel-endpoint: %w", err)
			}
			defer stopOTel()
			reap := os.Getpid() == 1
			if reap {
				// Root in the sandbox must not ptrace-stop or read the control plane (its
				// memory holds the access token). Children get the default back at exec.
				if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
					return fmt.Errorf("make envd not dumpable: %w", err)
				}
			}
			if subreaper && !reap {
				if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
					return fmt.Errorf("--subreaper: %w", err)
				}
				reap = true
			}
			// Plain TCP, not Go's default MPTCP: CRIU cannot checkpoint an MPTCP socket, and
			// a paused sandbox is a checkpoint.
			var lc net.ListenConfig
			lc.SetMultipathTCP(false)
			ln, err := lc.Listen(cmd.Context(), "tcp", addr)
			if err != nil {
				return fmt.Errorf("listen %s: %w", addr, err)
			}
			var sink *process.Sink
			switch collect {
			case "on":
				sink = process.NewSink(os.Stdout, budget)
			case "auto":
				if os.Getpid() == 1 { // inside a sandbox: stdout is the host's pipe
					sink = process.NewSink(os.Stdout, budget)
				}
			case "off":
			default:
				return fmt.Errorf("--collect must be auto, on or off, not %q", collect)
			}
			if sink != nil {
				sink.HeadBytes, sink.TailBytes, sink.CommandBytes = head, tail, cmdBytes
			}
			srv := envd.New(envd.Config{Logger: logger, MaxMessageBytes: maxMsg, KeepEnded: keepEnded, Reap: reap, Sink: sink})
			logger.Info("envd listening", telemetry.KeyAddr, ln.Addr().String(), telemetry.KeyVersion, envd.Version, telemetry.KeySelfPID, os.Getpid(), telemetry.KeyReap, reap)
			return srv.Serve(cmd.Context(), ln)
		},
	}
	f := cmd.Flags()
	f.StringVar(&addr, "addr", fmt.Sprintf("0.0.0.0:%d", envdapi.Port), "address to listen on")
	f.IntVar(&maxMsg, "max-message-bytes", envd.DefaultMaxMessageBytes, "largest Connect message accepted")
	f.DurationVar(&keepEnded, "keep-ended", 30*time.Second, "how long an exited process's end event stays available to Connect")
	f.BoolVar(&subreaper, "subreaper", false, "become a child subreaper and reap orphans (automatic as PID 1)")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	otelFlag(cmd, &otelURL)
	f.IntVar(&head, "record-head-bytes", 4096, "bytes of each command's stdout and stderr kept from the start, in its record")
	f.IntVar(&tail, "record-tail-bytes", 4096, "bytes of each command's stdout and stderr kept from the end, in its record")
	f.IntVar(&budget.LinesPerSec, "collect-lines-per-sec", 5000, "output lines collected per second for the sandbox; past it lines are dropped and counted")
	f.IntVar(&budget.LineBurst, "collect-line-burst", 10000, "output lines collected at once before collect-lines-per-sec applies")
	f.Int64Var(&budget.BytesPerSec, "collect-bytes-per-sec", 1<<20, "output bytes collected per second for the sandbox; past it output is dropped and counted")
	f.Int64Var(&budget.ByteBurst, "collect-byte-burst", 16<<20, "output bytes collected at once before collect-bytes-per-sec applies")
	f.Int64Var(&cmdBytes, "collect-command-bytes", 64<<20, "output bytes collected per stream of one command; the record's head and tail are kept past it")
	f.StringVar(&collect, "collect", "auto", "write output lines and command records as JSON to stdout: auto (when PID 1), on or off")
	return cmd
}
