package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cove-dev/cove/requestid"
	cove "github.com/cove-dev/cove/sdk"
)

// newObserveCmds are the verbs that read what Cove recorded: logs, events, commands,
// webhooks, trace and explain. Each has its own API flags, as the other client verbs do.
func newObserveCmds() []*cobra.Command {
	var out []*cobra.Command
	for _, mk := range []func(*apiFlags) *cobra.Command{newLogsCmd, newEventsCmd, newCommandsCmd, newWebhookCmd, newTraceCmd, newExplainCmd} {
		f := &apiFlags{}
		cmd := mk(f)
		f.register(cmd)
		out = append(out, cmd)
	}
	return out
}

func newLogsCmd(f *apiFlags) *cobra.Command {
	var requestID, search, level string
	var fields []string
	var follow bool
	var limit int
	cmd := &cobra.Command{
		Use:   "logs SANDBOX",
		Short: "Show a sandbox's logs: its commands' output and envd's lines, labelled with its metadata",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			pairs, err := parsePairs("field", fields)
			if err != nil {
				return err
			}
			client, err := f.client()
			if err != nil {
				return err
			}
			q := cove.LogQuery{RequestID: requestID, Search: search, Level: level, Fields: pairs, Limit: limit}
			for {
				page, err := client.Logs(cmd.Context(), args[0], q)
				if err != nil {
					return err
				}
				for _, l := range page.Logs {
					if f.asJSON {
						b, _ := json.Marshal(l)
						fmt.Println(string(b))
						continue
					}
					where := l.Fields["source"]
					if s := l.Fields["stream"]; s != "" {
						where += " " + s
					}
					if p := l.Fields["process.pid"]; p != "" && p != "0" {
						where += " pid " + p
					}
					fmt.Printf("%s %-5s [%s] %s\n", l.Timestamp.Format(time.RFC3339Nano), l.Level, where, l.Message)
				}
				if page.NextCursor != nil && *page.NextCursor != "" {
					q.Cursor = *page.NextCursor
					continue
				}
				if !follow {
					return nil
				}
				select {
				case <-cmd.Context().Done():
					return nil
				case <-time.After(time.Second):
				}
			}
		},
	}
	cmd.Flags().StringVar(&requestID, "request-id", "", "only lines of this request")
	cmd.Flags().StringVar(&search, "search", "", "only lines containing every word (or a \"quoted phrase\")")
	cmd.Flags().StringVar(&level, "level", "", "minimum level: debug, info, warn or error")
	cmd.Flags().StringArrayVar(&fields, "field", nil, "only lines whose field KEY has VALUE, KEY=VALUE (repeatable; e.g. taskId=t-42)")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new lines")
	cmd.Flags().IntVar(&limit, "limit", 1000, "lines per page")
	f.jsonFlag(cmd)
	return cmd
}

func newEventsCmd(f *apiFlags) *cobra.Command {
	var types []string
	var limit int
	cmd := &cobra.Command{
		Use:   "events [SANDBOX]",
		Short: "List lifecycle events (created, connected, paused, resumed, updated, killed, oom), newest first",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			id := ""
			if len(args) == 1 {
				id = args[0]
			}
			evs, err := c.Events(cmd.Context(), id, cove.EventOptions{Types: types, Limit: limit})
			if err != nil {
				return err
			}
			if f.asJSON {
				return printJSON(evs)
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TIME\tSANDBOX\tEVENT\tREQUEST\tDETAIL")
			for _, e := range evs {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", e.Timestamp.Format(time.RFC3339), e.SandboxID,
					strings.TrimPrefix(e.Type, "sandbox.lifecycle."), e.RequestID, detail(e))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringArrayVar(&types, "type", nil, "only events of this type (repeatable; e.g. sandbox.lifecycle.killed)")
	cmd.Flags().IntVar(&limit, "limit", 100, "events to show (1..1000)")
	f.jsonFlag(cmd)
	return cmd
}

// detail is the facts of an event's payload worth a column.
func detail(e cove.SandboxEvent) string {
	data, err := e.Data()
	if err != nil {
		return err.Error()
	}
	var parts []string
	add := func(k string, v any) { parts = append(parts, fmt.Sprintf("%s=%v", k, v)) }
	switch d := data.(type) {
	case *cove.KilledEventData:
		add("kill_reason", d.KillReason)
	case *cove.CreatedEventData:
		add("timeout", d.TimeoutSeconds)
	case *cove.ResumedEventData:
		add("timeout", d.TimeoutSeconds)
		add("end_at", d.EndAt.Format(time.RFC3339))
	case *cove.UpdatedEventData:
		add("timeout", d.TimeoutSeconds)
		add("end_at", d.EndAt.Format(time.RFC3339))
	case *cove.ConnectedEventData:
		add("end_at", d.EndAt.Format(time.RFC3339))
	case *cove.OOMEventData:
		add("count", d.Count)
	}
	if name := keyName(data); name != "" {
		add("api_key_name", name)
	}
	return strings.Join(parts, " ")
}

// keyName is the name of the key whose call caused an event, when the payload says.
func keyName(data any) string {
	if c, ok := data.(interface{ GetAPIKeyName() string }); ok {
		return c.GetAPIKeyName()
	}
	return ""
}

// outcome says in a few words how a recorded command ended.
func outcome(c cove.CommandRecord) string {
	switch {
	case c.EndCause == "":
		return "running"
	case c.EndCause == "sandbox_killed":
		return "sandbox killed (" + c.KillReason + ")"
	case c.ExitCode != nil:
		return fmt.Sprintf("exit %d", *c.ExitCode)
	case c.SignalRequestID != "":
		return fmt.Sprintf("%s %s by %s", c.EndCause, c.Signal, c.SignalRequestID)
	}
	return c.EndCause + " " + c.Signal
}

func newCommandsCmd(f *apiFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "commands SANDBOX [PID]",
		Short: "List the commands a sandbox ran, or show one with the head and tail of its output",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := f.client()
			if err != nil {
				return err
			}
			if len(args) == 2 {
				pid, err := strconv.Atoi(args[1])
				if err != nil || pid < 1 {
					return fmt.Errorf("pid %q: want a positive integer", args[1])
				}
				c, err := client.Command(cmd.Context(), args[0], pid)
				if err != nil {
					return err
				}
				if f.asJSON {
					return printJSON(c)
				}
				fmt.Printf("pid %d  %s %s\nstarted %s by request %s as %s: %s\n", c.PID, c.Command, strings.Join(c.Args, " "),
					c.StartedAt.Format(time.RFC3339Nano), c.RequestID, c.User, outcome(*c))
				for _, s := range []struct{ name, text string }{{"stdout head", c.StdoutHead}, {"stdout tail", c.StdoutTail},
					{"stderr head", c.StderrHead}, {"stderr tail", c.StderrTail}} {
					if s.text != "" {
						fmt.Printf("--- %s\n%s\n", s.name, strings.TrimRight(s.text, "\n"))
					}
				}
				return nil
			}
			page, err := client.Commands(cmd.Context(), args[0], "")
			if err != nil {
				return err
			}
			if f.asJSON {
				return printJSON(page.Commands)
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "PID\tSTARTED\tCOMMAND\tREQUEST\tOUTCOME")
			for _, c := range page.Commands {
				line := strings.TrimSpace(c.Command + " " + strings.Join(c.Args, " "))
				if len(line) > 60 {
					line = line[:57] + "..."
				}
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", c.PID, c.StartedAt.Format(time.RFC3339Nano), line, c.RequestID, outcome(c))
			}
			return tw.Flush()
		},
	}
	f.jsonFlag(cmd)
	return cmd
}

func newWebhookCmd(f *apiFlags) *cobra.Command {
	cmd := &cobra.Command{Use: "webhook", Short: "Manage signed webhooks for lifecycle events"}
	var evs []string
	var secret string
	// withClient runs fn with the CLI's SDK client.
	withClient := func(fn func(cmd *cobra.Command, c *cove.Client, args []string) error) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, args []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			return fn(cmd, c, args)
		}
	}
	add := &cobra.Command{
		Use: "add URL", Short: "Register a webhook; its signing secret is printed once", Args: cobra.ExactArgs(1),
		RunE: withClient(func(cmd *cobra.Command, c *cove.Client, args []string) error {
			req := cove.WebhookRequest{URL: args[0], Events: evs}
			if secret != "" {
				req.Secret = &secret
			}
			out, err := c.AddWebhook(cmd.Context(), req)
			if err != nil {
				return err
			}
			return printJSON(out)
		}),
	}
	add.Flags().StringArrayVar(&evs, "event", nil, "event type to deliver (repeatable; all when none)")
	add.Flags().StringVar(&secret, "secret", "", "signing secret (generated when empty)")
	list := &cobra.Command{
		Use: "list", Short: "List webhooks", Args: cobra.NoArgs,
		RunE: withClient(func(cmd *cobra.Command, c *cove.Client, _ []string) error {
			out, err := c.Webhooks(cmd.Context())
			if err != nil {
				return err
			}
			return printJSON(out)
		}),
	}
	rm := &cobra.Command{
		Use: "rm ID", Short: "Remove a webhook", Args: cobra.ExactArgs(1),
		RunE: withClient(func(cmd *cobra.Command, c *cove.Client, args []string) error {
			return c.RemoveWebhook(cmd.Context(), args[0])
		}),
	}
	deliveries := &cobra.Command{
		Use: "deliveries ID", Short: "Show a webhook's deliveries and every attempt", Args: cobra.ExactArgs(1),
		RunE: withClient(func(cmd *cobra.Command, c *cove.Client, args []string) error {
			out, err := c.WebhookDeliveries(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return printJSON(out)
		}),
	}
	cmd.AddCommand(add, list, rm, deliveries)
	return cmd
}

func newTraceCmd(f *apiFlags) *cobra.Command {
	var clientLog string
	cmd := &cobra.Command{
		Use:   "trace REQUEST_ID",
		Short: "One timeline of everything Cove knows for a request id, merged with a client's JSON log",
		Long: `cove trace shows, in time order, what the server, the proxy, envd, the command and the
lifecycle events recorded under one request id. With --client-log it merges the JSON lines
of a client's log (the Go SDK's, say) that carry the same request_id, so a client's cancel
and envd's stream end read side by side.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := f.client()
			if err != nil {
				return err
			}
			tl, err := client.Trace(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			entries := tl.Entries
			if clientLog != "" {
				more, err := clientEntries(clientLog, args[0])
				if err != nil {
					return err
				}
				entries = append(entries, more...)
				sort.SliceStable(entries, func(i, j int) bool { return entries[i].Time.Before(entries[j].Time) })
			}
			if f.asJSON {
				return printJSON(entries)
			}
			if len(entries) == 0 {
				return fmt.Errorf("nothing recorded under request id %s for this team", args[0])
			}
			t0 := entries[0].Time
			for _, e := range entries {
				fmt.Printf("%+9.3fs  %-7s %s%s\n", e.Time.Sub(t0).Seconds(), e.Source, e.Message, facts(e.Fields))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&clientLog, "client-log", "", "a client's JSON log file to merge (lines with this request_id)")
	f.jsonFlag(cmd)
	return cmd
}

// facts picks the fields that explain a step.
func facts(f map[string]any) string {
	var parts []string
	for _, k := range []string{"cancel.cause", "stream.end", "stream.phase", "rpc.method", "process.pid", "process.exit.code",
		"process.signal", "signal.request_id", "end_cause", "kill_reason", "http.response.status_code", "error"} {
		if v, ok := f[k]; ok && fmt.Sprint(v) != "" {
			parts = append(parts, fmt.Sprintf("%s=%v", k, v))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "  (" + strings.Join(parts, " ") + ")"
}

// clientEntries reads a JSON-lines log and keeps the lines of one request id.
func clientEntries(path, requestID string) ([]cove.TraceEntry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []cove.TraceEntry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) != nil || m["request_id"] != requestID {
			continue
		}
		e := cove.TraceEntry{Source: "client", Fields: m}
		if t, ok := m["time"].(string); ok {
			e.Time, _ = time.Parse(time.RFC3339Nano, t)
		}
		e.Message, _ = m["msg"].(string)
		out = append(out, e)
	}
	return out, sc.Err()
}

func newExplainCmd(f *apiFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "explain SANDBOX",
		Short: "Why a sandbox is paused or gone: who or what did it, when, and what it looked like then",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			c, err := f.client()
			if err != nil {
				return err
			}
			info, err := c.Info(cmd.Context(), id)
			var killed *cove.SandboxKilledError
			switch {
			case err == nil:
				fmt.Printf("sandbox %s is %s (template %s), started %s, its timeout ends at %s\n", id, info.State, info.TemplateID,
					info.StartedAt.Format(time.RFC3339), info.EndAt.Format(time.RFC3339))
				evs, err := c.Events(cmd.Context(), id, cove.EventOptions{Types: []string{cove.EventSandboxPaused}, Limit: 1})
				if err == nil && len(evs) > 0 && info.State == cove.StatePaused {
					fmt.Printf("paused at %s by %s\n", evs[0].Timestamp.Format(time.RFC3339), who(evs[0]))
				}
				return nil
			case errors.As(err, &killed), errors.Is(err, cove.ErrNotFound):
			default:
				return err
			}
			evs, err := c.Events(cmd.Context(), id, cove.EventOptions{Types: []string{cove.EventSandboxKilled}, Limit: 1})
			if err != nil {
				return err
			}
			if len(evs) == 0 {
				return fmt.Errorf("sandbox %s: no such sandbox for this team", id)
			}
			k := evs[0]
			if f.asJSON {
				return printJSON(k)
			}
			data, err := k.Data()
			if err != nil {
				return err
			}
			d := data.(*cove.KilledEventData)
			fmt.Printf("sandbox %s was killed at %s: reason %s, by %s\n", id, k.Timestamp.Format(time.RFC3339), d.KillReason, who(k))
			if d.KillReason == "timeout" {
				fmt.Printf("its timeout ended at %s\n", d.EndAt.Format(time.RFC3339))
			}
			ex := d.Execution
			fmt.Printf("it ran %d ms from %s with %d vCPU and %d MB\n", ex.ExecutionTimeMS, ex.StartedAt.Format(time.RFC3339), ex.VCPUCount, ex.MemoryMB)
			pm := d.Postmortem
			if pm == nil {
				return nil
			}
			if res := pm.Resources; res != nil {
				fmt.Printf("at the kill: memory %.1f of %.0f MiB (peak %.1f MiB), %d OOM kills, %d processes\n",
					float64(res.MemoryBytes)/(1<<20), float64(res.MemoryLimitBytes)/(1<<20),
					float64(res.MemoryMaxBytes)/(1<<20), res.OOMKills, res.PIDs)
			}
			if len(pm.Processes) > 0 {
				fmt.Println("processes at the kill, biggest memory first:")
				for _, p := range pm.Processes {
					fmt.Printf("  pid %-6d %8.1f MiB  %s\n", p.PID, float64(p.RSSBytes)/(1<<20), p.Command)
				}
			}
			if len(pm.LastOutput) > 0 {
				fmt.Println("last output:")
				for _, l := range pm.LastOutput {
					fmt.Printf("  %s\n", l)
				}
			}
			return nil
		},
	}
	f.jsonFlag(cmd)
	return cmd
}

func who(e cove.SandboxEvent) string {
	if e.RequestID == requestid.System || e.RequestID == "" {
		return "Cove itself (request id " + requestid.System + ")"
	}
	s := "request " + e.RequestID
	data, _ := e.Data()
	if name := keyName(data); name != "" {
		s += " with API key " + name
	} else if e.APIKeyID != "" {
		s += " with API key " + e.APIKeyID
	}
	return s
}
