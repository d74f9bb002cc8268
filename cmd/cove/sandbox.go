package main

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	cove "github.com/cove-dev/cove/sdk"
	"github.com/cove-dev/cove/sdk/reason"
)

func newSandboxCmd() *cobra.Command {
	var f apiFlags
	cmd := &cobra.Command{
		Use:     "sandbox",
		Aliases: []string{"sb"},
		Short:   "Create, list, inspect, pause, resume and kill sandboxes (through the API, with the Go SDK)",
	}
	f.register(cmd)
	cmd.AddCommand(sandboxNetworkCmd(&f))
	cmd.AddCommand(
		sandboxCreateCmd(&f), sandboxListCmd(&f), sandboxInfoCmd(&f), sandboxKillCmd(&f),
		sandboxPauseCmd(&f), sandboxResumeCmd(&f), sandboxTimeoutCmd(&f), sandboxRefreshCmd(&f),
		sandboxMetricsCmd(&f),
		sandboxForkCmd(&f),
	)
	return cmd
}

func sandboxCreateCmd(f *apiFlags) *cobra.Command {
	var opts cove.SandboxOptions
	var metadata, envs, volumes []string
	var rules cove.NetworkRules
	var privatePorts bool
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create a sandbox and print its id",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if opts.Metadata, err = parsePairs("metadata", metadata); err != nil {
				return err
			}
			if opts.EnvVars, err = parsePairs("env", envs); err != nil {
				return err
			}
			for _, v := range volumes {
				m, err := parseVolumeMount(v)
				if err != nil {
					return err
				}
				opts.VolumeMounts = append(opts.VolumeMounts, m)
			}
			if privatePorts {
				rules.AllowPublicTraffic = new(bool)
			}
			if rules.AllowOut != nil || rules.DenyOut != nil || rules.EgressProxy != nil || rules.Rules != nil || privatePorts ||
				rules.HTTPSPorts != nil || rules.MaskRequestHost != "" {
				opts.Network = &rules
			}
			sb, err := call(f, func(c *cove.Client) (*cove.Sandbox, error) { return c.Create(cmd.Context(), opts) })
			if err != nil {
				return err
			}
			if f.asJSON {
				return printJSON(map[string]any{
					"sandboxID": sb.ID, "templateID": sb.TemplateID, "alias": sb.Alias,
					"envdVersion": sb.EnvdVersion, "secure": sb.Secure, "requestID": sb.RequestID(),
					"trafficAccessToken": sb.TrafficAccessToken,
				})
			}
			fmt.Println(sb.ID)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&opts.Template, "template", "t", "base", "template id or alias")
	durationFlag(cmd, &opts.Timeout, "timeout", 0, "how long the sandbox lives (300, 90s, 5m); the server's default when 0")
	fl.StringArrayVarP(&metadata, "metadata", "m", nil, "metadata KEY=VALUE, kept with the sandbox (repeatable)")
	fl.StringArrayVarP(&envs, "env", "e", nil, "environment variable KEY=VALUE for every command (repeatable)")
	fl.BoolVar(&opts.Insecure, "insecure", false, "make the sandbox without an access token: its envd answers anyone who knows its id")
	fl.BoolVar(&opts.AutoPause, "auto-pause", false, "pause instead of kill when the timeout passes")
	fl.BoolVar(&opts.AutoResume, "auto-resume", false, "resume when traffic reaches the paused sandbox")
	fl.StringArrayVar(&volumes, "volume", nil, "mount a volume NAME:PATH, read-write (in one live sandbox at a time), or NAME:PATH:ro read-only (in any number); repeatable (`cove volume create` makes one)")
	fl.IntSliceVar(&rules.HTTPSPorts, "https-port", nil, "a port of the sandbox that serves HTTPS: the proxy speaks TLS to it (repeatable)")
	fl.StringVar(&rules.MaskRequestHost, "mask-host", "", "the Host header the proxy sends the sandbox's ports (${PORT} is the port)")
	fl.BoolVar(&privatePorts, "private-ports", false, "keep the sandbox's ports private: requests need its trafficAccessToken (printed with --json)")
	networkRuleFlags(cmd, &opts.NoInternet, &rules.AllowOut, &rules.DenyOut, &rules.EgressProxy, &rules.Rules)
	f.jsonFlag(cmd)
	return cmd
}

func sandboxListCmd(f *apiFlags) *cobra.Command {
	var metadata, states []string
	var order, template, startedAfter string
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the team's sandboxes",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			md, err := parsePairs("metadata", metadata)
			if err != nil {
				return err
			}
			opts := cove.ListOptions{Metadata: md, Template: template}
			if opts.Order, err = cove.ParseListOrder(order); err != nil {
				return fmt.Errorf("--order %q: want asc or desc", order)
			}
			if startedAfter != "" {
				if opts.StartedAfter, err = time.Parse(time.RFC3339Nano, startedAfter); err != nil {
					return fmt.Errorf("--started-after %q: want an RFC 3339 time such as 2026-12-04T10:00:00Z", startedAfter)
				}
			}
			for _, s := range states {
				switch st := cove.SandboxState(s); st {
				case cove.StateRunning, cove.StatePaused:
					opts.States = append(opts.States, st)
				default:
					return fmt.Errorf("--state %q: want running or paused", s)
				}
			}
			c, err := f.client()
			if err != nil {
				return err
			}
			infos := []*cove.SandboxInfo{}
			for info, err := range c.List(cmd.Context(), opts) {
				if err != nil {
					return cliError(err)
				}
				infos = append(infos, info)
			}
			if f.asJSON {
				return printJSON(infos)
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tTEMPLATE\tSTATE\tSTARTED\tENDS\tMETADATA")
			for _, i := range infos {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", i.SandboxID, i.TemplateID, i.State,
					i.StartedAt.Local().Format(time.DateTime), i.EndAt.Local().Format(time.DateTime), pairs(i.Metadata))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringArrayVarP(&metadata, "metadata", "m", nil, "keep sandboxes with metadata KEY=VALUE (repeatable; all must match)")
	cmd.Flags().StringSliceVar(&states, "state", nil, "keep sandboxes in these states: running, paused (default both)")
	cmd.Flags().StringVar(&order, "order", "desc", "by start time: desc (newest first) or asc")
	cmd.Flags().StringVar(&template, "template", "", "keep sandboxes of this template (id or alias)")
	cmd.Flags().StringVar(&startedAfter, "started-after", "", "keep sandboxes started at or after this RFC 3339 time")
	f.jsonFlag(cmd)
	return cmd
}

func sandboxInfoCmd(f *apiFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:               "info SANDBOX",
		Short:             "Describe a sandbox; a killed one's error says why and when",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: f.completeSandboxID,
		RunE: func(cmd *cobra.Command, args []string) error {
			i, err := call(f, func(c *cove.Client) (*cove.SandboxInfo, error) { return c.Info(cmd.Context(), args[0]) })
			if err != nil {
				return err
			}
			if f.asJSON {
				return printJSON(i)
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			for _, row := range [][2]string{
				{"id", i.SandboxID}, {"template", i.TemplateID}, {"alias", i.Alias}, {"state", string(i.State)},
				{"started", i.StartedAt.Local().Format(time.RFC3339)}, {"ends", i.EndAt.Local().Format(time.RFC3339)},
				{"cpus", fmt.Sprint(i.CPUCount)}, {"memory", fmt.Sprintf("%d MB", i.MemoryMB)},
				{"disk", fmt.Sprintf("%d MB", i.DiskSizeMB)}, {"envd", i.EnvdVersion}, {"metadata", pairs(i.Metadata)},
				{"internet", fmt.Sprint(i.AllowInternetAccess)}, {"network", networkSummary(i.Network)},
				{"volumes", volumeMountsSummary(i.VolumeMounts)},
			} {
				fmt.Fprintf(tw, "%s:\t%s\n", row[0], row[1])
			}
			return tw.Flush()
		},
	}
	f.jsonFlag(cmd)
	return cmd
}

func sandboxMetricsCmd(f *apiFlags) *cobra.Command {
	var since time.Duration
	cmd := &cobra.Command{
		Use:   "metrics SANDBOX...",
		Short: "Show resource samples: one sandbox's over --since, or several sandboxes' newest",
		Long: "With one sandbox, its CPU, memory and disk samples over --since (GET /sandboxes/{id}/metrics);\n" +
			"with several, each one's newest sample (GET /sandboxes/metrics).",
		Args:              cobra.RangeArgs(1, 100),
		ValidArgsFunction: f.completeSandboxID,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			type row struct {
				id string
				m  cove.Metric
			}
			var rows []row
			if len(args) == 1 {
				series, err := c.Metrics(cmd.Context(), args[0], time.Now().Add(-since), time.Time{})
				if err != nil {
					return cliError(err)
				}
				if f.asJSON {
					return printJSON(series)
				}
				for _, m := range series {
					rows = append(rows, row{args[0], m})
				}
			} else {
				latest, err := c.LatestMetrics(cmd.Context(), args...)
				if err != nil {
					return cliError(err)
				}
				if f.asJSON {
					return printJSON(latest)
				}
				for _, id := range args {
					if m, ok := latest[id]; ok {
						rows = append(rows, row{id, m})
					}
				}
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SANDBOX\tTIME\tCPU\tMEMORY\tDISK")
			for _, r := range rows {
				fmt.Fprintf(tw, "%s\t%s\t%.1f%% of %d\t%s / %s\t%s / %s\n", r.id, r.m.Timestamp.Local().Format(time.TimeOnly),
					r.m.CPUUsedPct, r.m.CPUCount, mib(r.m.MemUsed), mib(r.m.MemTotal), mib(r.m.DiskUsed), mib(r.m.DiskTotal))
			}
			return tw.Flush()
		},
	}
	f.jsonFlag(cmd)
	cmd.Flags().DurationVar(&since, "since", 10*time.Minute, "with one sandbox: how far back")
	return cmd
}

// mib formats a byte count in MiB.
func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func sandboxKillCmd(f *apiFlags) *cobra.Command {
	return &cobra.Command{
		Use:               "kill SANDBOX...",
		Short:             "Kill sandboxes (kill reason: request)",
		Args:              cobra.MinimumNArgs(1),
		ValidArgsFunction: f.completeSandboxID,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			if len(args) == 1 {
				return cliError(c.Kill(cmd.Context(), args[0]))
			}
			failed := 0
			for _, id := range args {
				if err := c.Kill(cmd.Context(), id); err != nil {
					fmt.Fprintln(os.Stderr, "cove:", cliError(err))
					failed++
				}
			}
			if failed > 0 {
				return fmt.Errorf("%d of %d kills failed", failed, len(args))
			}
			return nil
		},
	}
}

func sandboxPauseCmd(f *apiFlags) *cobra.Command {
	var kind string
	cmd := &cobra.Command{
		Use:               "pause SANDBOX",
		Short:             "Pause a running sandbox: a snapshot to disk (RAM freed), or --kind freeze (in RAM)",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: f.completeSandboxID,
		RunE: func(cmd *cobra.Command, args []string) error {
			var opts cove.PauseOptions
			if kind != "" {
				k, err := reason.ParsePauseKind(kind)
				if err != nil {
					return fmt.Errorf("--kind: %w (want snapshot, freeze or filesystem)", err)
				}
				opts.Kind = k
			}
			return f.run(func(c *cove.Client) error { return c.PauseWith(cmd.Context(), args[0], opts) })
		},
	}
	cmd.Flags().StringVar(&kind, "kind", "", "snapshot (processes and memory to disk, survives a server restart), freeze (in RAM, milliseconds) or filesystem (only the files are kept: the resume reboots it and runs its start command again; traffic never resumes it); the server's default when empty")
	return cmd
}

func sandboxResumeCmd(f *apiFlags) *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:               "resume SANDBOX",
		Short:             "Resume a paused sandbox",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: f.completeSandboxID,
		RunE: func(cmd *cobra.Command, args []string) error {
			_, err := call(f, func(c *cove.Client) (*cove.Sandbox, error) { return c.Resume(cmd.Context(), args[0], timeout) })
			return err
		},
	}
	durationFlag(cmd, &timeout, "timeout", 0, "how long it lives from now (300, 90s, 5m); the server's default when 0")
	return cmd
}

func sandboxTimeoutCmd(f *apiFlags) *cobra.Command {
	return &cobra.Command{
		Use:               "timeout SANDBOX DURATION",
		Short:             "Make a sandbox live DURATION from now (300, 90s, 5m), shorter or longer",
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: f.completeSandboxID,
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := parseDuration(args[1])
			if err != nil {
				return err
			}
			if d < time.Second {
				return fmt.Errorf("timeout %q: at least one second", args[1])
			}
			return f.run(func(c *cove.Client) error { return c.SetTimeout(cmd.Context(), args[0], d) })
		},
	}
}

func sandboxRefreshCmd(f *apiFlags) *cobra.Command {
	return &cobra.Command{
		Use:               "refresh SANDBOX [DURATION]",
		Short:             "Make a sandbox live at least DURATION from now (300, 90s, 5m); never shortens it",
		Args:              cobra.RangeArgs(1, 2),
		ValidArgsFunction: f.completeSandboxID,
		RunE: func(cmd *cobra.Command, args []string) error {
			var d time.Duration
			if len(args) == 2 {
				var err error
				if d, err = parseDuration(args[1]); err != nil {
					return err
				}
				if d < time.Second {
					return fmt.Errorf("duration %q: at least one second", args[1])
				}
			}
			return f.run(func(c *cove.Client) error { return c.Refresh(cmd.Context(), args[0], d) })
		},
	}
}

// pairs renders metadata as k=v,k=v in key order.
func pairs(m map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k + "=" + m[k])
	}
	return b.String()
}
