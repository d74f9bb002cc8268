package main

import "github.com/spf13/cobra"

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
