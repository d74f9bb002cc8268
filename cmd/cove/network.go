package main

import (
	"strings"

	"github.com/spf13/cobra"

	cove "github.com/cove-dev/cove/sdk"
)

// networkRuleFlags adds --no-internet, --allow-out and --deny-out to cmd.
func networkRuleFlags(cmd *cobra.Command, noInternet *bool, allow, deny *[]string) {
	fl := cmd.Flags()
	fl.BoolVar(noInternet, "no-internet", false, "cut the sandbox off from every destination --allow-out does not name")
	fl.StringSliceVar(allow, "allow-out", nil, "CIDR or IP the sandbox may reach, even when denied otherwise (repeatable, comma-separated)")
	fl.StringSliceVar(deny, "deny-out", nil, "CIDR or IP the sandbox may not reach; 0.0.0.0/0 is all traffic (repeatable, comma-separated)")
}

func sandboxNetworkCmd(f *apiFlags) *cobra.Command {
	var u cove.NetworkUpdate
	cmd := &cobra.Command{
		Use:   "network SANDBOX [--no-internet] [--allow-out CIDR]... [--deny-out CIDR]...",
		Short: "Replace a sandbox's egress rules (what is left out is cleared); applies to its next packets",
		Example: `  cove sandbox network $SB --deny-out 0.0.0.0/0 --allow-out 198.18.0.0/15
  cove sandbox network $SB            # back to open internet access, no rules`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: f.completeSandboxID,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			if err := c.UpdateNetwork(cmd.Context(), args[0], u); err != nil {
				return cliError(err)
			}
			return nil
		},
	}
	networkRuleFlags(cmd, &u.NoInternet, &u.AllowOut, &u.DenyOut)
	return cmd
}

// networkSummary renders egress rules for `cove sandbox info`.
func networkSummary(n *cove.NetworkRules) string {
	if n == nil || len(n.AllowOut)+len(n.DenyOut) == 0 {
		return "no rules"
	}
	var parts []string
	if len(n.AllowOut) > 0 {
		parts = append(parts, "allow "+strings.Join(n.AllowOut, ","))
	}
	if len(n.DenyOut) > 0 {
		parts = append(parts, "deny "+strings.Join(n.DenyOut, ","))
	}
	return strings.Join(parts, "; ")
}
