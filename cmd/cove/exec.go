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

	"github.com/cove-dev/cove/reason"
	cove "github.com/cove-dev/cove/sdk"
)

func newExecCmd() *cobra.Command {
	var f apiFlags
	var timeout time.Duration
	var background bool
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
				log.Warn("exec interrupted", slog.String("cancel.cause", reason.CancelCallerExit.String()),
					slog.String("sandbox.id", args[0]), slog.String("request_id", cove.RequestIDOf(err)),
					slog.String("hint", "interrupted before the start event arrived: the command may be running in the sandbox"))
				os.Exit(130)
				return nil
			}
			sb, err := f.sandbox(ctx, args[0])
			if err != nil {
				return interrupted(err)
			}
			line := shellLine(args[1:])
			opts := []cove.Option{cove.Timeout(timeout), cove.Cwd(cwd), cove.User(user), cove.Envs(env)}
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
			h, err := sb.Commands.Start(ctx, line, opts...)
			if err != nil {
				return interrupted(err)
			}
			<-h.Done()
			_, err = h.Wait(context.Background())
			var exit *cove.CommandExitError
			switch {
			case err == nil:
				return nil
			case errors.As(err, &exit):
				os.Exit(exitCode(exit))
			case errors.Is(err, cove.ErrCallerExit):
				log.Warn("exec interrupted",
					slog.String("cancel.cause", reason.CancelCallerExit.String()),
					slog.String("sandbox.id", sb.ID),
					slog.Int("process.pid", int(h.PID())),
					slog.String("request_id", h.RequestID()),
					slog.String("hint", "the command keeps running in the sandbox"))
				os.Exit(130)
			}
			return cliError(err)
		},
	}
	fl := cmd.Flags()
	fl.SetInterspersed(false) // flags after SANDBOX belong to the command
	durationFlag(cmd, &timeout, "timeout", 0, "kill the command after this long (300, 90s, 5m); no limit when 0")
	fl.BoolVarP(&background, "background", "b", false, "print the pid and detach; the command keeps running")
	fl.StringVar(&cwd, "cwd", "", "working directory; the user's home by default")
	fl.StringVarP(&user, "user", "u", "", "run as this user of the sandbox")
	fl.StringArrayVarP(&envs, "env", "e", nil, "environment variable KEY=VALUE (repeatable)")
	f.register(cmd)
	return cmd
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
