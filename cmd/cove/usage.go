package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"
)

// newUsageCmd prints the API key's team and its sandbox activity (E2B's team metrics).
func newUsageCmd() *cobra.Command {
	var f apiFlags
	var since time.Duration
	cmd := &cobra.Command{
		Use:   "usage",
		Short: "Show your team and its sandboxes over time: alive at most, starts per second (through the API)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			teams, err := c.Teams(ctx)
			if err != nil {
				return cliError(err)
			}
			if len(teams) == 0 {
				return fmt.Errorf("the API key has no team")
			}
			team := teams[0]
			end := time.Now()
			start := end.Add(-since)
			series, err := c.TeamMetrics(ctx, team.ID, start, end)
			if err != nil {
				return cliError(err)
			}
			if f.asJSON {
				return printJSON(map[string]any{"team": team, "metrics": series})
			}
			peak, peakRate := 0, 0.0
			for _, p := range series {
				peak, peakRate = max(peak, p.ConcurrentSandboxes), max(peakRate, p.SandboxStartRate)
			}
			now := 0
			if len(series) > 0 {
				now = series[len(series)-1].ConcurrentSandboxes
			}
			fmt.Fprintf(cmd.OutOrStdout(), "team %s (%s)\nsandboxes alive now: %d\nin the last %s: at most %d alive, at most %.2f starts/s\n",
				team.Name, team.ID, now, since, peak, peakRate)
			return nil
		},
	}
	f.register(cmd)
	cmd.Flags().BoolVar(&f.asJSON, "json", false, "print JSON")
	cmd.Flags().DurationVar(&since, "since", time.Hour, "how far back")
	return cmd
}
