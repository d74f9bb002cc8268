package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	cove "github.com/cove-dev/cove/sdk"
)

// networkRuleFlags adds --no-internet, --allow-out, --deny-out and --egress-proxy to cmd.
func networkRuleFlags(cmd *cobra.Command, noInternet *bool, allow, deny *[]string, proxy **cove.EgressProxy, rules *map[string][]cove.Rule) {
	fl := cmd.Flags()
	fl.Var(&ruleFlag{rules: rules}, "header-rule", "HOST:NAME=VALUE: set the header on the sandbox's HTTP(S) requests to HOST (or *.DOMAIN), on Cove's side (repeatable)")
	fl.Var(&proxyFlag{p: proxy}, "egress-proxy", "SOCKS5 proxy [USER[:PASSWORD]@]HOST:PORT the sandbox's TCP goes through (the password also from $COVE_EGRESS_PROXY_PASSWORD)")
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
			return f.run(func(c *cove.Client) error { return c.UpdateNetwork(cmd.Context(), args[0], u) })
		},
	}
	networkRuleFlags(cmd, &u.NoInternet, &u.AllowOut, &u.DenyOut, &u.EgressProxy, &u.Rules)
	return cmd
}

// networkSummary renders egress rules for `cove sandbox info`.
func networkSummary(n *cove.NetworkRules) string {
	if n == nil || len(n.AllowOut)+len(n.DenyOut) == 0 && n.EgressProxy == nil {
		return "no rules"
	}
	var parts []string
	if len(n.AllowOut) > 0 {
		parts = append(parts, "allow "+strings.Join(n.AllowOut, ","))
	}
	if len(n.DenyOut) > 0 {
		parts = append(parts, "deny "+strings.Join(n.DenyOut, ","))
	}
	if n.EgressProxy != nil {
		parts = append(parts, "through SOCKS5 "+n.EgressProxy.Address)
	}
	return strings.Join(parts, "; ")
}

// explainNetwork prints, for `cove explain`, the failed commands during which the network
// refused the sandbox connections, then the other refusals (network.denied events, sampled).
func explainNetwork(ctx context.Context, c *cove.Client, id string) {
	evs, err := c.Events(ctx, id, cove.EventOptions{Types: []string{cove.EventSandboxNetworkDenied}, Limit: 100})
	if err != nil || len(evs) == 0 {
		return
	}
	denied := make([]*cove.NetworkDeniedEventData, len(evs))
	for i, e := range evs {
		d, err := e.Data()
		if err != nil {
			return
		}
		denied[i] = d.(*cove.NetworkDeniedEventData)
	}
	var cmds []cove.CommandRecord
	if page, err := c.Commands(ctx, id, ""); err == nil {
		cmds = page.Commands
	}
	explained := map[int]bool{}
	for _, r := range cmds {
		if r.ExitCode == nil || *r.ExitCode == 0 || r.DurationMS == nil {
			continue
		}
		end := r.StartedAt.Add(time.Duration(*r.DurationMS * float64(time.Millisecond)))
		var parts []string
		for i, d := range denied {
			if d.FirstAt.Before(r.StartedAt.Add(-time.Second)) || d.FirstAt.After(end.Add(time.Second)) {
				continue
			}
			explained[i] = true
			parts = append(parts, d.String())
		}
		if len(parts) > 0 {
			fmt.Printf("%s exited %d: %s\n", commandLine(r.Command, r.Args), *r.ExitCode, strings.Join(parts, "; "))
		}
	}
	var rest []string
	for i, d := range denied {
		if !explained[i] {
			rest = append(rest, fmt.Sprintf("  %s %s", evs[i].Timestamp.Format(time.RFC3339), d.String()))
		}
	}
	if len(rest) > 0 {
		fmt.Println("connections the network rules refused (sampled, newest first):")
		fmt.Println(strings.Join(rest, "\n"))
	}
}

// commandLine shows what ran: the script of a shell's -c, or the command and its arguments.
func commandLine(cmd string, args []string) string {
	for i, a := range args {
		if a == "-c" && i+1 < len(args) {
			return args[i+1]
		}
	}
	return strings.TrimSpace(cmd + " " + strings.Join(args, " "))
}

// proxyFlag reads [USER[:PASSWORD]@]HOST:PORT into an egress proxy.
type proxyFlag struct{ p **cove.EgressProxy }

func (f *proxyFlag) String() string {
	if f.p == nil || *f.p == nil {
		return ""
	}
	return (*f.p).Address
}

func (f *proxyFlag) Type() string { return "proxy" }

func (f *proxyFlag) Set(v string) error {
	p := &cove.EgressProxy{Address: v}
	if cred, addr, ok := strings.Cut(v, "@"); ok {
		p.Address = addr
		p.Username, p.Password, _ = strings.Cut(cred, ":")
	}
	if pw := os.Getenv("COVE_EGRESS_PROXY_PASSWORD"); pw != "" && p.Password == "" {
		p.Password = pw
	}
	if p.Address == "" {
		return fmt.Errorf("want [USER[:PASSWORD]@]HOST:PORT")
	}
	*f.p = p
	return nil
}

// ruleFlag reads HOST:NAME=VALUE into header rules.
type ruleFlag struct{ rules *map[string][]cove.Rule }

func (f *ruleFlag) String() string { return "" }
func (f *ruleFlag) Type() string   { return "rule" }

func (f *ruleFlag) Set(v string) error {
	host, header, ok := strings.Cut(v, ":")
	name, value, ok2 := strings.Cut(header, "=")
	if !ok || !ok2 || host == "" || name == "" {
		return fmt.Errorf("want HOST:NAME=VALUE")
	}
	if *f.rules == nil {
		*f.rules = map[string][]cove.Rule{}
	}
	rs := (*f.rules)[host]
	if len(rs) == 0 {
		rs = []cove.Rule{{Transform: cove.Transform{Headers: map[string]string{}}}}
	}
	rs[0].Transform.Headers[name] = value
	(*f.rules)[host] = rs
	return nil
}
