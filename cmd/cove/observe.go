package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	cove "github.com/cove-dev/cove/sdk"
)

// rest does one call to Cove's REST API with the CLI's URL and key, a fresh request id, and
// errors that name it.
func (f *apiFlags) rest(ctx context.Context, method, path string, body any, out any) error {
	c, err := f.client()
	if err != nil {
		return err
	}
	cfg := c.Config()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(cfg.APIURL, "/")+path, rd)
	if err != nil {
		return err
	}
	id := cove.NewRequestID()
	req.Header.Set(cove.HeaderRequestID, id)
	req.Header.Set("X-API-Key", cfg.APIKey)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w (request id %s)", method, path, err, id)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode >= 300 {
		var e struct{ Message string }
		_ = json.Unmarshal(b, &e)
		if e.Message == "" {
			e.Message = strings.TrimSpace(string(b))
		}
		if !strings.Contains(e.Message, id) {
			e.Message += " (request id " + id + ")"
		}
		return &httpError{status: res.StatusCode, msg: fmt.Sprintf("%s %s: %s: %s", method, path, res.Status, e.Message)}
	}
	if out != nil && len(b) > 0 {
		return json.Unmarshal(b, out)
	}
	return nil
}

type httpError struct {
	status int
	msg    string
}

func (e *httpError) Error() string { return e.msg }

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

type logLine struct {
	Timestamp string            `json:"timestamp"`
	Message   string            `json:"message"`
	Level     string            `json:"level"`
	Fields    map[string]string `json:"fields"`
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
			q := url.Values{"limit": {strconv.Itoa(limit)}}
			for k, v := range map[string]string{"request_id": requestID, "search": search, "level": level} {
				if v != "" {
					q.Set(k, v)
				}
			}
			pairs, err := parsePairs("field", fields)
			if err != nil {
				return err
			}
			for k, v := range pairs {
				q.Set("fields."+k, v)
			}
			for {
				var page struct {
					Logs       []logLine `json:"logs"`
					NextCursor *string   `json:"nextCursor"`
				}
				if err := f.rest(cmd.Context(), http.MethodGet, "/v2/sandboxes/"+args[0]+"/logs?"+q.Encode(), nil, &page); err != nil {
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
					fmt.Printf("%s %-5s [%s] %s\n", l.Timestamp, l.Level, where, l.Message)
				}
				if page.NextCursor != nil && *page.NextCursor != "" {
					q.Set("cursor", *page.NextCursor)
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

type event struct {
	ID        string            `json:"id"`
	Type      string            `json:"type"`
	Timestamp time.Time         `json:"timestamp"`
	SandboxID string            `json:"sandboxId"`
	RequestID string            `json:"requestId"`
	APIKeyID  string            `json:"apiKeyId"`
	Metadata  map[string]string `json:"sandboxMetadata"`
	Data      map[string]any    `json:"eventData"`
}

func newEventsCmd(f *apiFlags) *cobra.Command {
	var types []string
	var limit int
	cmd := &cobra.Command{
		Use:   "events [SANDBOX]",
		Short: "List lifecycle events (created, connected, paused, resumed, updated, killed, oom), newest first",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := "/events/sandboxes"
			if len(args) == 1 {
				path += "/" + args[0]
			}
			q := url.Values{"limit": {strconv.Itoa(limit)}}
			if len(types) > 0 {
				q.Set("type", strings.Join(types, ","))
			}
			var evs []event
			if err := f.rest(cmd.Context(), http.MethodGet, path+"?"+q.Encode(), nil, &evs); err != nil {
				return err
			}
			if f.asJSON {
				return printJSON(evs)
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TIME\tSANDBOX\tEVENT\tREQUEST\tDETAIL")
			for _, e := range evs {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", e.Timestamp.Format(time.RFC3339), e.SandboxID,
					strings.TrimPrefix(e.Type, "sandbox.lifecycle."), e.RequestID, detail(e.Data))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringArrayVar(&types, "type", nil, "only events of this type (repeatable; e.g. sandbox.lifecycle.killed)")
	cmd.Flags().IntVar(&limit, "limit", 100, "events to show (1..1000)")
	f.jsonFlag(cmd)
	return cmd
}

func detail(d map[string]any) string {
	var parts []string
	for _, k := range []string{"kill_reason", "api_key_name", "timeout", "end_at", "count"} {
		if v, ok := d[k]; ok {
			parts = append(parts, fmt.Sprintf("%s=%v", k, v))
		}
	}
	return strings.Join(parts, " ")
}

type command struct {
	PID             int      `json:"pid"`
	Tag             string   `json:"tag"`
	RequestID       string   `json:"requestId"`
	User            string   `json:"user"`
	Command         string   `json:"command"`
	Args            []string `json:"args"`
	StartedAt       string   `json:"startedAt"`
	DurationMS      *float64 `json:"durationMs"`
	ExitCode        *int     `json:"exitCode"`
	Signal          string   `json:"signal"`
	EndCause        string   `json:"endCause"`
	SignalRequestID string   `json:"signalRequestId"`
	KillReason      string   `json:"killReason"`
	StdoutHead      string   `json:"stdoutHead"`
	StdoutTail      string   `json:"stdoutTail"`
	StderrHead      string   `json:"stderrHead"`
	StderrTail      string   `json:"stderrTail"`
	Truncated       bool     `json:"truncated"`
}

func (c command) outcome() string {
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
			if len(args) == 2 {
				var c command
				if err := f.rest(cmd.Context(), http.MethodGet, "/sandboxes/"+args[0]+"/commands/"+args[1], nil, &c); err != nil {
					return err
				}
				if f.asJSON {
					return printJSON(c)
				}
				fmt.Printf("pid %d  %s %s\nstarted %s by request %s as %s: %s\n", c.PID, c.Command, strings.Join(c.Args, " "),
					c.StartedAt, c.RequestID, c.User, c.outcome())
				for _, s := range []struct{ name, text string }{{"stdout head", c.StdoutHead}, {"stdout tail", c.StdoutTail},
					{"stderr head", c.StderrHead}, {"stderr tail", c.StderrTail}} {
					if s.text != "" {
						fmt.Printf("--- %s\n%s\n", s.name, strings.TrimRight(s.text, "\n"))
					}
				}
				return nil
			}
			var page struct {
				Commands []command `json:"commands"`
			}
			if err := f.rest(cmd.Context(), http.MethodGet, "/sandboxes/"+args[0]+"/commands", nil, &page); err != nil {
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
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", c.PID, c.StartedAt, line, c.RequestID, c.outcome())
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
	add := &cobra.Command{
		Use: "add URL", Short: "Register a webhook; its signing secret is printed once", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			body := map[string]any{"url": args[0], "events": evs}
			if secret != "" {
				body["secret"] = secret
			}
			var out map[string]any
			if err := f.rest(cmd.Context(), http.MethodPost, "/events/webhooks", body, &out); err != nil {
				return err
			}
			return printJSON(out)
		},
	}
	add.Flags().StringArrayVar(&evs, "event", nil, "event type to deliver (repeatable; all when none)")
	add.Flags().StringVar(&secret, "secret", "", "signing secret (generated when empty)")
	list := &cobra.Command{
		Use: "list", Short: "List webhooks", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var out []map[string]any
			if err := f.rest(cmd.Context(), http.MethodGet, "/events/webhooks", nil, &out); err != nil {
				return err
			}
			return printJSON(out)
		},
	}
	rm := &cobra.Command{
		Use: "rm ID", Short: "Remove a webhook", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.rest(cmd.Context(), http.MethodDelete, "/events/webhooks/"+args[0], nil, nil)
		},
	}
	deliveries := &cobra.Command{
		Use: "deliveries ID", Short: "Show a webhook's deliveries and every attempt", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var out any
			if err := f.rest(cmd.Context(), http.MethodGet, "/events/webhooks/"+args[0]+"/deliveries", nil, &out); err != nil {
				return err
			}
			return printJSON(out)
		},
	}
	cmd.AddCommand(add, list, rm, deliveries)
	return cmd
}

type traceEntry struct {
	Time      time.Time      `json:"time"`
	Source    string         `json:"source"`
	SandboxID string         `json:"sandboxId,omitempty"`
	Level     string         `json:"level,omitempty"`
	Message   string         `json:"message"`
	Fields    map[string]any `json:"fields,omitempty"`
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
			var tl struct {
				Entries []traceEntry `json:"entries"`
			}
			if err := f.rest(cmd.Context(), http.MethodGet, "/traces/"+url.PathEscape(args[0]), nil, &tl); err != nil {
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
func clientEntries(path, requestID string) ([]traceEntry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []traceEntry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) != nil || m["request_id"] != requestID {
			continue
		}
		e := traceEntry{Source: "client", Fields: m}
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
			var info map[string]any
			err := f.rest(cmd.Context(), http.MethodGet, "/sandboxes/"+id, nil, &info)
			var he *httpError
			switch {
			case err == nil:
				fmt.Printf("sandbox %s is %v (template %v), started %v, its timeout ends at %v\n", id, info["state"], info["templateID"], info["startedAt"], info["endAt"])
				var evs []event
				if err := f.rest(cmd.Context(), http.MethodGet, "/events/sandboxes/"+id+"?limit=1&type=sandbox.lifecycle.paused", nil, &evs); err == nil && len(evs) > 0 && info["state"] == "paused" {
					fmt.Printf("paused at %s by %s\n", evs[0].Timestamp.Format(time.RFC3339), who(evs[0]))
				}
				explainNetwork(cmd.Context(), f, id)
				return nil
			case asHTTP(err, &he) && he.status == http.StatusNotFound:
			default:
				return err
			}
			var evs []event
			if err := f.rest(cmd.Context(), http.MethodGet, "/events/sandboxes/"+id+"?limit=1&type=sandbox.lifecycle.killed", nil, &evs); err != nil {
				return err
			}
			if len(evs) == 0 {
				return fmt.Errorf("sandbox %s: no such sandbox for this team", id)
			}
			k := evs[0]
			if f.asJSON {
				return printJSON(k)
			}
			fmt.Printf("sandbox %s was killed at %s: reason %v, by %s\n", id, k.Timestamp.Format(time.RFC3339), k.Data["kill_reason"], who(k))
			if k.Data["kill_reason"] == "timeout" {
				fmt.Printf("its timeout ended at %v\n", k.Data["end_at"])
			}
			if ex, ok := k.Data["execution"].(map[string]any); ok {
				fmt.Printf("it ran %v ms from %v with %v vCPU and %v MB\n", ex["execution_time"], ex["started_at"], ex["vcpu_count"], ex["memory_mb"])
			}
			pm, _ := k.Data["postmortem"].(map[string]any)
			if res, ok := pm["resources"].(map[string]any); ok {
				fmt.Printf("at the kill: memory %.1f of %.0f MiB (peak %.1f MiB), %v OOM kills, %v processes\n",
					toFloat(res["memory_bytes"])/(1<<20), toFloat(res["memory_limit_bytes"])/(1<<20),
					toFloat(res["memory_max_bytes"])/(1<<20), res["oom_kills"], res["pids"])
			}
			if procs, ok := pm["processes"].([]any); ok && len(procs) > 0 {
				fmt.Println("processes at the kill, biggest memory first:")
				for _, p := range procs {
					m, _ := p.(map[string]any)
					fmt.Printf("  pid %-6v %8.1f MiB  %v\n", m["pid"], toFloat(m["rss_bytes"])/(1<<20), m["command"])
				}
			}
			if lines, ok := pm["last_output"].([]any); ok && len(lines) > 0 {
				fmt.Println("last output:")
				for _, l := range lines {
					fmt.Printf("  %v\n", l)
				}
			}
			explainNetwork(cmd.Context(), f, id)
			return nil
		},
	}
	f.jsonFlag(cmd)
	return cmd
}

func who(e event) string {
	if e.RequestID == "system" || e.RequestID == "" {
		return "Cove itself (request id system)"
	}
	s := "request " + e.RequestID
	if name, ok := e.Data["api_key_name"].(string); ok && name != "" {
		s += " with API key " + name
	} else if e.APIKeyID != "" {
		s += " with API key " + e.APIKeyID
	}
	return s
}

func toFloat(v any) float64 {
	f, _ := v.(float64)
	return f
}

func asHTTP(err error, target **httpError) bool {
	e, ok := err.(*httpError)
	if ok {
		*target = e
	}
	return ok
}
