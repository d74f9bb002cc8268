package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	cove "github.com/cove-dev/cove/sdk"
	"github.com/cove-dev/cove/sdk/reason"
)

// outcome says in a few words how a recorded command ended.
func outcome(c cove.CommandRecord) string {
	switch {
	case c.EndCause == "":
		return "running"
	case c.EndCause == reason.EndSandboxKilled:
		return "sandbox killed (" + c.KillReason.String() + ")"
	case c.ExitCode != nil:
		return fmt.Sprintf("exit %d", *c.ExitCode)
	case c.SignalRequestID != "":
		return fmt.Sprintf("%s %s by %s", c.EndCause, c.Signal, c.SignalRequestID)
	}
	return c.EndCause.String() + " " + c.Signal
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
