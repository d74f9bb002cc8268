package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	cove "github.com/cove-dev/cove/sdk"
	"github.com/cove-dev/cove/sdk/reason"
	"github.com/cove-dev/cove/sdk/requestid"
)

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
		if d.Pooled {
			add("pooled", true)
			add("claim_ms", d.ClaimMS)
		}
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
	case *cove.LimitReachedEventData:
		add("limit", d.Limit)
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
				fmt.Printf("sandbox %s is %s (template %s, runtime %s, on %s), started %s, its timeout ends at %s\n", id, info.State, info.TemplateID,
					cmp.Or(info.Runtime, "runc"), info.ClientID, info.StartedAt.Format(time.RFC3339), info.EndAt.Format(time.RFC3339))
				evs, err := c.Events(cmd.Context(), id, cove.EventOptions{Types: []string{cove.EventSandboxPaused}, Limit: 1})
				if err == nil && len(evs) > 0 && info.State == cove.StatePaused {
					fmt.Printf("paused at %s by %s\n", evs[0].Timestamp.Format(time.RFC3339), who(evs[0]))
					if d, _ := evs[0].Data(); isFilesystemPause(d) {
						fmt.Println("it was paused without its memory: its files are kept, its processes are gone; traffic does not resume it, and a connect or resume reboots it (its start command runs again)")
					}
				}
				printPauses(cmd.Context(), c, id)
				explainNetwork(cmd.Context(), c, id)
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
			defer explainNetwork(cmd.Context(), c, id)
			defer printPauses(cmd.Context(), c, id)
			if d.KillReason == "timeout" {
				fmt.Printf("its timeout ended at %s\n", d.EndAt.Format(time.RFC3339))
			}
			ex := d.Execution
			fmt.Printf("it ran %d ms from %s with %d vCPU and %d MB\n", ex.ExecutionTimeMS, ex.StartedAt.Format(time.RFC3339), ex.VCPUCount, ex.MemoryMB)
			pm := d.Postmortem
			if pm == nil {
				return nil
			}
			if pm.Detail != "" {
				fmt.Printf("why: %s\n", pm.Detail)
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

// printPauses prints a sandbox's pauses, resumes and checkpoints, oldest first: when, how
// (snapshot, freeze or filesystem), how long each took, how big the snapshot or the kept
// files were, and whether a resume rebooted the sandbox.
func printPauses(ctx context.Context, c *cove.Client, id string) {
	evs, err := c.Events(ctx, id, cove.EventOptions{Types: []string{cove.EventSandboxPaused, cove.EventSandboxResumed,
		cove.EventSandboxCheckpointed}, Limit: 1000})
	if err != nil {
		return
	}
	var lines []string
	for i := len(evs) - 1; i >= 0; i-- {
		e := evs[i]
		data, err := e.Data()
		if err != nil {
			continue
		}
		var kind, purpose string
		var ms, bytes int64
		rebooted := false
		switch d := data.(type) {
		case *cove.PausedEventData:
			kind, ms, bytes = d.Kind, d.DurationMS, d.SnapshotBytes
		case *cove.ResumedEventData:
			kind, ms, rebooted = d.Kind, d.DurationMS, d.Rebooted
		case *cove.CheckpointedEventData:
			purpose, ms, bytes = d.Purpose, d.DurationMS, d.SnapshotBytes
		}
		line := fmt.Sprintf("  %s  %-12s", e.Timestamp.Format(time.RFC3339), strings.TrimPrefix(e.Type, "sandbox.lifecycle."))
		if kind != "" {
			line += fmt.Sprintf(" %-8s", kind)
		}
		if purpose != "" {
			line += " for a " + purpose
		}
		line += fmt.Sprintf(" in %d ms", ms)
		switch {
		case bytes > 0 && kind == "filesystem":
			line += fmt.Sprintf(", files kept %.1f MiB (memory dropped)", float64(bytes)/(1<<20))
		case bytes > 0:
			line += fmt.Sprintf(", snapshot %.1f MiB", float64(bytes)/(1<<20))
		}
		if rebooted {
			line += ", rebooted (a cold boot: processes started afresh, the start command and ready check ran again)"
		}
		lines = append(lines, line+", by "+who(e))
	}
	if len(lines) > 0 {
		fmt.Println("pauses and restores:")
		fmt.Println(strings.Join(lines, "\n"))
	}
}

// isFilesystemPause says a paused event's data is of a pause that kept only the files.
func isFilesystemPause(data any) bool {
	d, ok := data.(*cove.PausedEventData)
	return ok && d.Kind == reason.PauseFilesystem.String()
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
