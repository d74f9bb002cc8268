package main

import (
	"fmt"
	"net/netip"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cove-dev/cove/internal/sandbox/network"
)

// networkFlags are cove server's --network-* flags.
type networkFlags struct {
	on                       bool
	pool, table, prefix, dns string
	limit                    []string
	ipForward                bool
	warm                     int
	logGroup                 uint16
	forbidPrivateProxies     bool
	upstreamCA               string
}

func (n *networkFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.BoolVar(&n.on, "network", true, "give sandboxes a way out (veth, NAT, DNS, egress rules); false: every sandbox is loopback only and reports allowInternetAccess false")
	f.StringVar(&n.pool, "network-pool", network.DefaultPool.String(), "IPv4 CIDR sandbox addresses come from (a /30 each); must not overlap the host's networks or another server's pool")
	f.StringVar(&n.table, "network-table", "", "name of the nftables table (family inet) the server owns, rebuilt at start and removed at shutdown; cove, or cove_<node> with --node")
	f.StringVar(&n.prefix, "network-link-prefix", "", "host-side veth names are <prefix>-<n> (1 to 6 of [a-z0-9]); two servers on one host need different ones; cove, or one derived from --node")
	f.StringVar(&n.dns, "network-dns", "host", `upstream resolvers for sandbox DNS: "host" (the host's /etc/resolv.conf), "none" (answer REFUSED), or ADDR[:PORT],...`)
	f.StringSliceVar(&n.limit, "network-egress-limit", nil, "CIDRs that are all any sandbox may reach, whatever its rules (empty: no limit)")
	f.BoolVar(&n.ipForward, "network-ip-forward", true, "turn on net.ipv4.ip_forward at start (needed for egress through the host's uplink)")
	f.Uint16Var(&n.logGroup, "network-log-group", 0, "netlink log group refused packets are sampled to (network.denied events); derived from --network-table when 0")
	f.BoolVar(&n.forbidPrivateProxies, "network-forbid-private-proxies", false, "refuse egressProxy addresses in private, loopback and link-local ranges (400)")
	f.StringVar(&n.upstreamCA, "network-upstream-ca", "", "PEM file of CAs trusted, beside the host's, for HTTPS servers that header rules re-encrypt to")
	f.IntVar(&n.warm, "network-warm", 4, "network namespaces kept ready, so create does not wait for one (-1: none)")
}

// config turns the flags into the network's config; errors name the flag.
func (n *networkFlags) config() (network.Config, error) {
	cfg := network.Config{Table: n.table, LinkPrefix: n.prefix, IPForward: n.ipForward, Warm: n.warm, LogGroup: n.logGroup,
		ForbidPrivateProxies: n.forbidPrivateProxies}
	var err error
	if n.upstreamCA != "" {
		if cfg.UpstreamCAs, err = os.ReadFile(n.upstreamCA); err != nil {
			return cfg, fmt.Errorf("--network-upstream-ca: %w", err)
		}
	}
	if cfg.Pool, err = netip.ParsePrefix(n.pool); err != nil {
		return cfg, fmt.Errorf("--network-pool %q: %w", n.pool, err)
	}
	switch n.dns {
	case "host":
	case "none":
		cfg.DNS = []netip.AddrPort{}
	default:
		cfg.DNS = []netip.AddrPort{}
		for _, s := range strings.Split(n.dns, ",") {
			s = strings.TrimSpace(s)
			ap, err := netip.ParseAddrPort(s)
			if err != nil {
				a, aerr := netip.ParseAddr(s)
				if aerr != nil {
					return cfg, fmt.Errorf("--network-dns %q: %q is not ADDR or ADDR:PORT", n.dns, s)
				}
				ap = netip.AddrPortFrom(a, 53)
			}
			cfg.DNS = append(cfg.DNS, ap)
		}
	}
	for _, s := range n.limit {
		p, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil {
			return cfg, fmt.Errorf("--network-egress-limit %q: %w", s, err)
		}
		cfg.EgressLimit = append(cfg.EgressLimit, p)
	}
	return cfg, nil
}
