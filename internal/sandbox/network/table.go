package network

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"

	"github.com/cove-dev/cove/internal/sandbox/egress"
)

// logRate is how many refused packets a second, per rule of a sandbox, the kernel hands
// Cove (egress reads them from the log group, samples and reports them).
const logRate = "10/second burst 20 packets"

// logRule is the nft statement that hands a sample of a refused packet to Cove.
func (m *Manager) logRule(kind egress.DenyKind) string {
	return fmt.Sprintf("limit rate %s log group %d prefix %q", logRate, m.cfg.LogGroup, string(kind))
}

// refuse is the two rules that refuse what match selects at once, instead of leaving the
// program inside to time out: a TCP reset ("connection refused"; ICMP errors are rate
// limited by the kernel, so a burst of connects would hang), else an ICMP admin-prohibited.
func refuse(match string) string {
	return fmt.Sprintf("%s meta l4proto tcp counter reject with tcp reset\n%s counter reject with icmpx type admin-prohibited", match, match)
}

// nft runs one nft script as one transaction: all of it applies, or none.
func (m *Manager) nft(ctx context.Context, script string) error {
	cmd := exec.CommandContext(ctx, m.cfg.NFT, "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("nft: %w: %s", err, strings.TrimSpace(out.String()))
	}
	return nil
}

// tableScript replaces Cove's table with a fresh one holding no sandbox: the base chains
// (DNS redirect, NAT, the host's and the sandboxes' guards) and an empty map from a
// sandbox's link to its own chain.
//
//	guard       a sandbox's packets with a source but its own are dropped
//	prerouting  DNS from a sandbox, to any address, goes to Cove's resolver
//	postrouting sandbox addresses leaving by another link are masqueraded
//	input       a sandbox reaches nothing on the host but the resolver
//	forward     nothing enters a sandbox's link but replies; what leaves one goes to egress,
//	            but for packets of a connection its current policy accepted (the fast path)
//	egress      IPv6 dropped; then the sandbox's own chain (sb_N), which starts with the
//	            server's limit (egress's Steps)
func (m *Manager) tableScript() string {
	t, p := m.cfg.Table, m.cfg.LinkPrefix+"-*"
	dns, proxy := m.egress.DNSPort(), m.egress.ProxyPort()
	var b strings.Builder
	// Declaring the table first makes the delete succeed whether or not it existed.
	fmt.Fprintf(&b, "table inet %s\ndelete table inet %s\ntable inet %s {\n", t, t, t)
	b.WriteString("\tmap links { type ifname : verdict; }\n")
	b.WriteString("\tset proxied { type ifname; }\n")             // links whose TCP goes to the egress proxy
	b.WriteString("\tset intercepted { type ifname; }\n")         // links whose HTTP(S) gets header transforms
	b.WriteString("\tset fast { type mark; }\n")                  // the marks of the sandboxes' current policies
	b.WriteString("\tset sources { type ifname . ipv4_addr; }\n") // each sandbox's link and its one address
	// A sandbox (root, CAP_NET_RAW) can write any source address: an IPv4 packet from its
	// link with another is dropped before anything (conntrack, the redirects to the resolver
	// and proxies, which know a sandbox by its address) sees it.
	fmt.Fprintf(&b, "\tchain guard { type filter hook prerouting priority raw; policy accept;\n"+
		"\t\tiifname %q iifname . ip saddr != @sources counter drop\n\t}\n", p)
	fmt.Fprintf(&b, "\tchain prerouting { type nat hook prerouting priority dstnat; policy accept;\n"+
		"\t\tiifname %q meta l4proto { tcp, udp } th dport 53 redirect to :%d\n"+
		"\t\tiifname @proxied meta l4proto tcp redirect to :%d\n"+
		"\t\tiifname @intercepted tcp dport { 80, 443 } redirect to :%d\n\t}\n", p, dns, proxy, proxy)
	fmt.Fprintf(&b, "\tchain postrouting { type nat hook postrouting priority srcnat; policy accept;\n"+
		"\t\tip saddr %s oifname != %q masquerade\n\t}\n", m.cfg.Pool, p)
	fmt.Fprintf(&b, "\tchain input { type filter hook input priority filter; policy accept;\n"+
		"\t\tiifname %q meta l4proto { tcp, udp } th dport %d accept\n"+
		"\t\tiifname @proxied tcp dport %d accept\n"+
		"\t\tiifname @intercepted tcp dport %d accept\n"+
		"\t\tiifname %q %s\n"+
		"\t\t%s\n"+
		"\t\tiifname != \"lo\" meta l4proto { tcp, udp } th dport { %d, %d } drop\n\t}\n", p, dns, proxy, proxy, p, m.logRule(egress.DenyHost), indent(refuse(fmt.Sprintf("iifname %q", p))), dns, proxy)
	fmt.Fprintf(&b, "\tchain forward { type filter hook forward priority filter; policy accept;\n"+
		"\t\toifname %q ct state established,related accept\n"+
		"\t\toifname %q counter drop\n"+
		"\t\tiifname %q ct state established ct mark @fast accept\n"+
		"\t\tiifname %q jump egress\n\t}\n", p, p, p, p)
	b.WriteString("\tchain egress {\n\t\tmeta nfproto ipv6 counter drop\n")
	b.WriteString("\t\tiifname vmap @links\n\t\t" + indent(refuse("meta nfproto ipv4")) + "\n\t}\n}\n")
	return b.String()
}

// sandboxScript (re)writes slot s's chain for policy p and maps its link to it, in one
// transaction: an update replaces the old rules atomically.
//
// Every connection the chain accepts gets mark, and the fast set holds the mark of each
// sandbox's current policy: the forward chain lets a connection's later packets through
// without walking the chains again, which was 15 % of a sandbox's TCP throughput. An update
// comes with a new mark and takes the old one out of the set, so the next packet of an open
// connection is judged by the new rules, as before.
func (m *Manager) sandboxScript(s *slot, p egress.Policy, existed bool, mark uint32) string {
	t, c := m.cfg.Table, s.chain()
	var b strings.Builder
	b.WriteString(m.unmarkScript(s))
	fmt.Fprintf(&b, "add element inet %s fast { 0x%08x }\n", t, mark)
	accept := fmt.Sprintf("counter ct mark set 0x%08x accept", mark)
	// The addresses the resolver answered for allowed hostnames; an update starts it afresh.
	fmt.Fprintf(&b, "add set inet %s %s { type ipv4_addr; flags timeout; }\nflush set inet %s %s\n", t, s.set(), t, s.set())
	fmt.Fprintf(&b, "add chain inet %s %s\nflush chain inet %s %s\n", t, c, t, c)
	rule := func(format string, args ...any) {
		fmt.Fprintf(&b, "add rule inet %s %s ", t, c)
		fmt.Fprintf(&b, format, args...)
		b.WriteByte('\n')
	}
	refuseRule := func(match string) {
		for _, line := range strings.Split(refuse(match), "\n") {
			rule("%s", line)
		}
	}
	rule("ip saddr != %s counter drop", s.addr) // no spoofed sources (guard drops them first)
	fmt.Fprintf(&b, "add element inet %s sources { %q . %s }\n", t, s.link, s.addr)
	// With an egress proxy, TCP never gets here (it is redirected to the proxy, which applies
	// the same rules): the rest is refused, so nothing leaves but through the proxy.
	fmt.Fprintf(&b, "add element inet %s intercepted { %q }\n", t, s.link)
	if len(p.Transforms) == 0 || p.EgressProxy != nil {
		fmt.Fprintf(&b, "delete element inet %s intercepted { %q }\n", t, s.link)
	}
	fmt.Fprintf(&b, "add element inet %s proxied { %q }\n", t, s.link)
	if p.EgressProxy != nil {
		refuseRule("meta nfproto ipv4")
	} else {
		fmt.Fprintf(&b, "delete element inet %s proxied { %q }\n", t, s.link)
	}
	for _, st := range m.egress.Steps(p) {
		if st.Deny == "" {
			rule("%s %s", nftMatch(st, s), accept)
			continue
		}
		rule("%s %s", nftMatch(st, s), m.logRule(st.Deny))
		refuseRule(nftMatch(st, s))
	}
	if !existed {
		fmt.Fprintf(&b, "add element inet %s links { %q : jump %s }\n", t, s.link, c)
	}
	return b.String()
}

// nftMatch renders what st matches as an nft expression of slot sl's chain.
func nftMatch(st egress.Step, sl *slot) string {
	switch st.Match {
	case egress.MatchOutside:
		return fmt.Sprintf("ip daddr != { %s }", join(st.Prefixes))
	case egress.MatchIn:
		return fmt.Sprintf("ip daddr { %s }", join(st.Prefixes))
	case egress.MatchHost:
		// A packet for the host is delivered (the input chain refuses it), never forwarded
		// here; the rule states what egress applies to the proxies' dials.
		return "fib daddr type local"
	case egress.MatchLearned:
		return "ip daddr @" + sl.set()
	}
	return "meta nfproto ipv4"
}

// unmarkScript takes slot s's current mark out of the fast set, whether or not it is there.
func (m *Manager) unmarkScript(s *slot) string {
	if s.mark == 0 {
		return ""
	}
	return fmt.Sprintf("add element inet %s fast { 0x%08x }\ndelete element inet %s fast { 0x%08x }\n", m.cfg.Table, s.mark, m.cfg.Table, s.mark)
}

// dropSandboxScript removes slot s's map entry, chain and mark.
func (m *Manager) dropSandboxScript(s *slot) string {
	t := m.cfg.Table
	return m.unmarkScript(s) + fmt.Sprintf("add element inet %s proxied { %q }\ndelete element inet %s proxied { %q }\n", t, s.link, t, s.link) +
		fmt.Sprintf("add element inet %s sources { %q . %s }\ndelete element inet %s sources { %q . %s }\n", t, s.link, s.addr, t, s.link, s.addr) +
		fmt.Sprintf("add element inet %s intercepted { %q }\ndelete element inet %s intercepted { %q }\n", t, s.link, t, s.link) +
		fmt.Sprintf("delete element inet %s links { %q }\ndelete chain inet %s %s\ndelete set inet %s %s\n", t, s.link, t, s.chain(), t, s.set())
}

// indent puts the lines of a multi-line rule at the table's rule depth.
func indent(rules string) string { return strings.ReplaceAll(rules, "\n", "\n\t\t") }

// join renders prefixes as an nft set's elements. nft rejects overlapping intervals in one
// anonymous set: those another one contains are left out.
func join(ps []netip.Prefix) string {
	return strings.Join(egress.Strings(egress.MergePrefixes(ps)), ", ")
}
