package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/observe/trace"
	cove "github.com/cove-dev/cove/sdk"
)

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
			spans, total := trace.Waterfall(entries)
			t0 := spans[0].Start
			fmt.Printf("%d steps over %s\n", len(spans), total.Round(time.Microsecond))
			for _, s := range spans {
				took := ""
				if s.Duration > 0 {
					took = s.Duration.Round(100 * time.Microsecond).String()
				}
				fmt.Printf("%+9.3fs %9s %s %-7s %s%s\n", s.Start.Sub(t0).Seconds(), took, bar(s, 24), s.Source, s.Message, facts(s.Fields))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&clientLog, "client-log", "", "a client's JSON log file to merge (lines with this request_id)")
	f.jsonFlag(cmd)
	return cmd
}

// bar draws a waterfall row's span in width cells: █ where it ran, · at a mark, │ at the ends.
func bar(s trace.Span, width int) string {
	cells := []rune(strings.Repeat(" ", width))
	from := min(width-1, int(s.Left*float64(width)/100))
	to := max(from+1, min(width, int((s.Left+s.Width)*float64(width)/100+0.5)))
	for i := from; i < to; i++ {
		if s.Duration > 0 {
			cells[i] = '█'
		} else {
			cells[i] = '·'
		}
	}
	return "│" + string(cells) + "│"
}

// facts picks the fields that explain a step.
func facts(f map[string]any) string {
	var parts []string
	for _, k := range []string{telemetry.KeyCancelCause, telemetry.KeyStreamEnd, telemetry.KeyStreamPhase, telemetry.KeyRPCMethod,
		telemetry.KeyPID, telemetry.KeyExitCode, telemetry.KeySignal, telemetry.KeySignalRequestID, telemetry.KeyEndCause,
		telemetry.KeyKillReason, telemetry.KeyHTTPStatus, telemetry.KeyError} {
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
		if json.Unmarshal(sc.Bytes(), &m) != nil || m[telemetry.KeyRequestID] != requestID {
			continue
		}
		e := cove.TraceEntry{Source: "client", Fields: m}
		if t, ok := m[slog.TimeKey].(string); ok {
			e.Time, _ = time.Parse(time.RFC3339Nano, t)
		}
		e.Message, _ = m[slog.MessageKey].(string)
		out = append(out, e)
	}
	return out, sc.Err()
}
