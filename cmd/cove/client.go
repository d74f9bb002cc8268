package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/cove-dev/cove/internal/observe/telemetry"
	cove "github.com/cove-dev/cove/sdk"
	"github.com/cove-dev/cove/sdk/requestid"
)

// apiFlags are the flags every client verb (sandbox, exec, files) shares: where Cove is,
// the key, and how loud the SDK's log is. Empty values fall through to the SDK's
// environment (COVE_API_URL/COVE_API_KEY, then E2B_API_URL/E2B_API_KEY).
type apiFlags struct {
	url, key string
	logLevel string
	asJSON   bool
}

// register adds the flags to cmd and its subcommands.
func (f *apiFlags) register(cmd *cobra.Command) {
	pf := cmd.PersistentFlags()
	pf.StringVar(&f.url, "api-url", "", "Cove's API URL [$COVE_API_URL, $E2B_API_URL; http://127.0.0.1:3000]")
	pf.StringVar(&f.key, "api-key", "", "API key [$COVE_API_KEY, $E2B_API_KEY]")
	pf.StringVar(&f.logLevel, "log-level", "warn", "the SDK's log level on stderr, as JSON: debug, info, warn or error")
}

// jsonFlag adds --json to a verb that reads.
func (f *apiFlags) jsonFlag(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&f.asJSON, "json", false, "print JSON")
}

// logger is the SDK's and the CLI's logger: JSON lines on stderr at --log-level.
func (f *apiFlags) logger() (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	return telemetry.NewLogger(os.Stderr, level), nil
}

// client returns an SDK client configured by the flags and the environment.
func (f *apiFlags) client() (*cove.Client, error) {
	l, err := f.logger()
	if err != nil {
		return nil, err
	}
	return cove.NewClient(cove.Config{APIURL: f.url, APIKey: f.key, Logger: l}), nil
}

// call runs one SDK call with the flags' client; its error is the CLI's (cliError).
func call[T any](f *apiFlags, do func(*cove.Client) (T, error)) (T, error) {
	c, err := f.client()
	if err != nil {
		var zero T
		return zero, err
	}
	v, err := do(c)
	return v, cliError(err)
}

// run is call for the calls that return only an error.
func (f *apiFlags) run(do func(*cove.Client) error) error {
	_, err := call(f, func(c *cove.Client) (struct{}, error) { return struct{}{}, do(c) })
	return err
}

// sandbox connects to a sandbox by id (resuming it when it is paused), for the verbs that
// go into it.
func (f *apiFlags) sandbox(ctx context.Context, id string) (*cove.Sandbox, error) {
	c, err := f.client()
	if err != nil {
		return nil, err
	}
	sb, err := c.Connect(ctx, id, 0)
	if err != nil {
		return nil, cliError(err)
	}
	return sb, nil
}

// completeSandboxID completes the first argument with the ids of the team's sandboxes.
func (f *apiFlags) completeSandboxID(cmd *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveDefault
	}
	c, err := f.client()
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), 5*time.Second)
	defer cancel()
	var ids []cobra.Completion
	for info, err := range c.List(ctx, cove.ListOptions{}) {
		if err != nil {
			return nil, cobra.ShellCompDirectiveError
		}
		ids = append(ids, cobra.CompletionWithDesc(info.SandboxID, info.TemplateID+" "+string(info.State)))
	}
	return ids, cobra.ShellCompDirectiveNoFileComp
}

// cliError makes an SDK error read well after main's "cove: " prefix, and makes sure it
// names the request id to look the call up in the server's logs.
func cliError(err error) error {
	if err == nil {
		return nil
	}
	msg := strings.TrimPrefix(err.Error(), "cove: ")
	msg = requestid.Annotate(msg, cove.RequestIDOf(err))
	return &wrapped{msg: msg, err: err}
}

type wrapped struct {
	msg string
	err error
}

func (w *wrapped) Error() string { return w.msg }
func (w *wrapped) Unwrap() error { return w.err }

// parsePairs parses repeated K=V flags into a map; nil when there are none.
func parsePairs(flag string, pairs []string) (map[string]string, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	m := make(map[string]string, len(pairs))
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--%s %q: want KEY=VALUE", flag, p)
		}
		m[k] = v
	}
	return m, nil
}

// parseDuration reads a duration as Go writes it ("90s", "5m") or as whole seconds ("300"),
// the unit E2B's API uses.
func parseDuration(s string) (time.Duration, error) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n < 0 {
			return 0, fmt.Errorf("negative duration %q", s)
		}
		return time.Duration(n) * time.Second, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("duration %q: want 300, 90s or 5m", s)
	}
	if d < 0 {
		return 0, fmt.Errorf("negative duration %q", s)
	}
	return d, nil
}

// durationValue is a flag that takes parseDuration's forms.
type durationValue struct{ d *time.Duration }

func (v durationValue) String() string {
	if v.d == nil || *v.d == 0 {
		return "0"
	}
	return v.d.String()
}

func (v durationValue) Set(s string) error {
	d, err := parseDuration(s)
	if err != nil {
		return err
	}
	*v.d = d
	return nil
}

func (durationValue) Type() string { return "duration" }

func durationFlag(cmd *cobra.Command, p *time.Duration, name string, def time.Duration, usage string) {
	*p = def
	cmd.Flags().Var(durationValue{p}, name, usage)
}

// exitCode is the shell's code for a command's end: its exit code, or 128+N for a signal.
func exitCode(e *cove.CommandExitError) int {
	if e.ExitCode >= 0 && e.ExitCode <= 255 && !strings.HasPrefix(e.Status, "signal: ") {
		return e.ExitCode
	}
	if name, ok := strings.CutPrefix(e.Status, "signal: "); ok {
		for n := 1; n < 65; n++ {
			if syscall.Signal(n).String() == name {
				return 128 + n
			}
		}
	}
	return 1
}
