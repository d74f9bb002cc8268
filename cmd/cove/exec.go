package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	cove "github.com/cove-dev/cove/sdk"
	"github.com/cove-dev/cove/sdk/reason"

	"github.com/cove-dev/cove/internal/observe/telemetry"
)

func newExecCmd() *cobra.Command {
	var f apiFlags
	var timeout time.Duration
	var background, interactive, tty, noStdin bool
	var cwd, user string
	var envs []string
	cmd := &cobra.Command{
		Use:   "exec SANDBOX [--] COMMAND [ARG...]",
		Short: "Run a command in a sandbox, streaming its output; its exit code is cove's",
		Long: `cove exec runs a command in a sandbox with bash -l -c. One argument is a shell command line
("cove exec SB -- 'ls $HOME | wc -l'"); several are a command and its arguments, quoted for
the shell ("cove exec SB -- sh -c 'exit 7'").

Output streams live to stdout and stderr, and cove exits with the command's code (128+N when
signal N killed it). Ctrl-C ends the stream, not the command: cove logs cancel.cause=caller_exit
with the pid and exits 130, and the command keeps running in the sandbox.

When stdin is a pipe or a file (or with -i), cove forwards it to the command's stdin and
closes that at EOF ("echo hi | cove exec SB -- cat"); -n leaves stdin alone. With -t the
command runs on a terminal; -it from a terminal makes it interactive: the local terminal is
put in raw mode (Ctrl-C then reaches the command, as in ssh), and window size changes follow.

With --background cove prints the pid and detaches at once; the command keeps running.`,
		Args:              cobra.MinimumNArgs(2),
		ValidArgsFunction: f.completeSandboxID,
		RunE: func(cmd *cobra.Command, args []string) error {
			if args[1] == "--" { // kept as an argument, since flags stop at SANDBOX
				args = slices.Delete(args, 1, 2)
			}
			if len(args) < 2 {
				return fmt.Errorf("no command to run: cove exec SANDBOX -- COMMAND [ARG...]")
			}
			if background && (tty || interactive) {
				return fmt.Errorf("--background detaches at once: it cannot be combined with -i or -t")
			}
			env, err := parsePairs("env", envs)
			if err != nil {
				return err
			}
			log, err := f.logger()
			if err != nil {
				return err
			}
			// Only NotifyExit may end this context: main's signal context would end it
			// too, and the SDK would then log sibling_cancel instead of caller_exit.
			ctx, stop := cove.NotifyExit(context.WithoutCancel(cmd.Context()))
			defer stop()
			interrupted := func(err error) error {
				if ctx.Err() == nil || !errors.Is(context.Cause(ctx), cove.ErrCallerExit) {
					return cliError(err)
				}
				log.Warn("exec interrupted", slog.String(telemetry.KeyCancelCause, reason.CancelCallerExit.String()),
					slog.String(telemetry.KeySandboxID, args[0]), slog.String(telemetry.KeyRequestID, cove.RequestIDOf(err)),
					slog.String(telemetry.KeyHint, "interrupted before the start event arrived: the command may be running in the sandbox"))
				os.Exit(130)
				return nil
			}
			sb, err := f.sandbox(ctx, args[0])
			if err != nil {
				return interrupted(err)
			}
			line := shellLine(args[1:])
			opts := []cove.Option{cove.Timeout(timeout), cove.Cwd(cwd), cove.User(user), cove.Envs(env)}
			if tty {
				return execTTY(ctx, sb, line, !noStdin && (interactive || forwardsStdin()), opts, interrupted, log)
			}
			if background {
				h, err := sb.Commands.Start(ctx, line, opts...)
				if err != nil {
					return interrupted(err)
				}
				fmt.Println(h.PID())
				h.Disconnect()
				return nil
			}
			opts = append(opts,
				cove.OnStdout(func(s string) { os.Stdout.WriteString(s) }),
				cove.OnStderr(func(s string) { os.Stderr.WriteString(s) }))
			stdin := !noStdin && (interactive || forwardsStdin())
			if stdin {
				opts = append(opts, cove.Stdin())
			}
			h, err := sb.Commands.Start(ctx, line, opts...)
			if err != nil {
				return interrupted(err)
			}
			if stdin {
				go func() {
					err := pumpInput(os.Stdin, func(b []byte) error { return h.SendStdin(ctx, string(b)) },
						func() error { return h.CloseStdin(ctx) }, h.Done())
					if err != nil && ctx.Err() == nil {
						select {
						case <-h.Done():
						default:
							log.Warn("stdin not forwarded", slog.String(telemetry.KeySandboxID, sb.ID), slog.Int(telemetry.KeyPID, int(h.PID())),
								slog.String(telemetry.KeyRequestID, cove.RequestIDOf(err)), slog.String(telemetry.KeyError, err.Error()))
						}
					}
				}()
			}
			return finishExec(sb, h, log)
		},
	}
	fl := cmd.Flags()
	fl.SetInterspersed(false) // flags after SANDBOX belong to the command
	durationFlag(cmd, &timeout, "timeout", 0, "kill the command after this long (300, 90s, 5m); no limit when 0")
	fl.BoolVarP(&background, "background", "b", false, "print the pid and detach; the command keeps running")
	fl.BoolVarP(&interactive, "interactive", "i", false, "forward stdin even when it is a terminal (pipes and files always are)")
	fl.BoolVarP(&noStdin, "no-stdin", "n", false, "do not forward stdin, even a pipe (as ssh -n; for loops that read their own stdin)")
	fl.BoolVarP(&tty, "tty", "t", false, "run the command on a terminal; with -i from a terminal, interactively in raw mode")
	fl.StringVar(&cwd, "cwd", "", "working directory; the user's home by default")
	fl.StringVarP(&user, "user", "u", "", "run as this user of the sandbox")
	fl.StringArrayVarP(&envs, "env", "e", nil, "environment variable KEY=VALUE (repeatable)")
	f.register(cmd)
	return cmd
}

// finishExec waits for the command's stream to end and exits as the command did.
func finishExec(sb *cove.Sandbox, h *cove.CommandHandle, log *slog.Logger) error {
	<-h.Done()
	_, err := h.Wait(context.Background())
	var exit *cove.CommandExitError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &exit):
		os.Exit(exitCode(exit))
	case errors.Is(err, cove.ErrCallerExit):
		log.Warn("exec interrupted",
			slog.String(telemetry.KeyCancelCause, reason.CancelCallerExit.String()),
			slog.String(telemetry.KeySandboxID, sb.ID),
			slog.Int(telemetry.KeyPID, int(h.PID())),
			slog.String(telemetry.KeyRequestID, h.RequestID()),
			slog.String(telemetry.KeyHint, "the command keeps running in the sandbox"))
		os.Exit(130)
	}
	return cliError(err)
}

// execTTY runs line on a terminal in the sandbox: its output to stdout, stdin forwarded when
// input is set, the local terminal raw while it runs and its size followed.
func execTTY(ctx context.Context, sb *cove.Sandbox, line string, input bool, opts []cove.Option, interrupted func(error) error, log *slog.Logger) error {
	opts = append(opts, cove.Command(line), cove.OnPTYData(func(b []byte) { os.Stdout.Write(b) }))
	h, err := sb.PTY.Create(ctx, termSize(os.Stdout), opts...)
	if err != nil {
		return interrupted(err)
	}
	restore := func() {}
	if input && isTerminal(os.Stdin) {
		if restore, err = makeRaw(os.Stdin); err != nil {
			h.Kill(context.WithoutCancel(ctx))
			return fmt.Errorf("raw terminal: %w", err)
		}
	}
	if isTerminal(os.Stdout) {
		resizeOnWinch(ctx, sb, h.PID(), os.Stdout)
	}
	if input {
		// A terminal has no stdin to close: the end of piped input is sent as Ctrl-D.
		go pumpInput(os.Stdin, func(b []byte) error { return sb.PTY.SendInput(ctx, h.PID(), b) },
			func() error { return sb.PTY.SendInput(ctx, h.PID(), []byte{4}) }, h.Done())
	}
	<-h.Done()
	restore() // before finishExec may exit: the user's terminal must not stay raw
	return finishExec(sb, h, log)
}

// shellLine makes the command line bash runs: one argument as it is, several quoted.
func shellLine(args []string) string {
	if len(args) == 1 {
		return args[0]
	}
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = shellQuote(a)
	}
	return strings.Join(quoted, " ")
}

var shellSafe = regexp.MustCompile(`^[A-Za-z0-9_@%+=:,./-]+$`)

func shellQuote(s string) string {
	if shellSafe.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
