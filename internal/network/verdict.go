package network

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// A sandbox's policy is one ordered list of steps (steps), which both enforcers read: the
// table renders it as the sandbox's chain (sandboxScript), and Cove's own proxies (the egress
// proxy and the header-rule interceptor, which dial from the host and so pass no forward
// chain) evaluate it in Go (decide). Whatever the table refuses, they refuse.

// matcher is what one step matches on. The set is closed.
type matcher int

const (
	matchOutside matcher = iota + 1 // the destination is in none of the prefixes
	matchIn                         // the destination is in one of the prefixes
	matchHost                       // the destination is one of the host's own addresses
	matchLearned                    // the resolver answered the sandbox the destination for an allowed name
	matchAll                        // every destination
)

// step is one rule of a sandbox's policy: what it matches and its verdict, "" to accept or
// the kind of the refusal.
type step struct {
	match    matcher
	prefixes []netip.Prefix
	deny     DenyKind
}

// steps is p in the order it applies: the server's egress limit, the host's own services
// and other sandboxes (never reachable, whatever the rules), allowOut (CIDRs, then the names
// the resolver answered), denyOut, link-local, then internet access on or off.
func (m *Manager) steps(p Policy) []step {
	var out []step
	if len(m.cfg.EgressLimit) > 0 {
		out = append(out, step{match: matchOutside, prefixes: m.cfg.EgressLimit, deny: DenyLimit})
	}
	out = append(out, step{match: matchHost, deny: DenyHost},
		step{match: matchIn, prefixes: []netip.Prefix{m.cfg.Pool}, deny: DenyLinkLocal})
	if len(p.AllowOut) > 0 {
		out = append(out, step{match: matchIn, prefixes: p.AllowOut})
	}
	if len(p.AllowHosts) > 0 {
		out = append(out, step{match: matchLearned})
	}
	if len(p.DenyOut) > 0 {
		out = append(out, step{match: matchIn, prefixes: p.DenyOut, deny: DenyOut})
	}
	out = append(out, step{match: matchIn, prefixes: []netip.Prefix{linkLocal}, deny: DenyLinkLocal})
	if p.AllowInternet {
		return append(out, step{match: matchAll})
	}
	return append(out, step{match: matchAll, deny: DenyNoNet})
}

// nftMatch renders what s matches as an nft expression of slot sl's chain.
func (s step) nftMatch(sl *slot) string {
	switch s.match {
	case matchOutside:
		return fmt.Sprintf("ip daddr != { %s }", join(s.prefixes))
	case matchIn:
		return fmt.Sprintf("ip daddr { %s }", join(s.prefixes))
	case matchHost:
		// A packet for the host is delivered (the input chain refuses it), never forwarded
		// here; the rule states what decide applies to the proxies' dials.
		return "fib daddr type local"
	case matchLearned:
		return "ip daddr @" + sl.set()
	}
	return "meta nfproto ipv4"
}

// decide applies h's policy to dst as the table does (steps): the kind of the refusal, or
// ok. Cove's proxies call it for every destination they dial for a sandbox.
func (m *Manager) decide(h *held, dst netip.Addr) (DenyKind, bool) { return m.decideNamed(h, dst, "") }

// decideNamed is decide for an address of an A record named name that Cove's own lookup
// answered (a header rule's host): when name is one of the sandbox's allowed hostnames, the
// address counts as one the resolver answered the sandbox (as there, the record's own name
// must match: a CNAME to a name not allowed opens nothing).
func (m *Manager) decideNamed(h *held, dst netip.Addr, name string) (DenyKind, bool) {
	m.mu.Lock()
	p := h.policy
	l, learned := h.learned[dst]
	m.mu.Unlock()
	learned = learned && time.Now().Before(l.until) || name != "" && p.AllowsHost(name)
	for _, s := range m.steps(p) {
		var hit bool
		switch s.match {
		case matchOutside:
			hit = !containsAny(s.prefixes, dst)
		case matchIn:
			hit = containsAny(s.prefixes, dst)
		case matchHost:
			hit = hostOwns(dst)
		case matchLearned:
			hit = learned
		case matchAll:
			hit = true
		}
		if hit {
			return s.deny, s.deny == ""
		}
	}
	return DenyNoNet, false // unreachable: the last step matches everything
}

// hostOwns reports whether a connection to a from the host would stay on the host: one of
// its addresses (the kernel's local routes, as nft's "fib daddr type local"), loopback, the
// unspecified address, broadcast or multicast. When the kernel cannot say, it does: a
// proxy fails closed.
func hostOwns(a netip.Addr) bool {
	if !a.Is4() || a.IsUnspecified() || a.IsLoopback() || a.IsMulticast() || a == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
		return true
	}
	routes, err := netlink.RouteGet(a.AsSlice())
	if err != nil || len(routes) == 0 {
		return true
	}
	for _, r := range routes {
		if r.Type == unix.RTN_LOCAL || r.Type == unix.RTN_BROADCAST || r.Type == unix.RTN_MULTICAST {
			return true
		}
	}
	return false
}

// permitQuery decides whether the resolver forwards a query of the sandbox at from for name
// upstream: always for a sandbox with internet access; for one without (offline), only for a
// name its allowOut names, and each query refused is reported (network.denied). A query
// from an address no sandbox holds goes nowhere.
func (m *Manager) permitQuery(from netip.Addr, name, proto string) bool {
	m.mu.Lock()
	h := m.byAddr[from]
	var p Policy
	var gw netip.Addr
	if h != nil {
		p, gw = h.policy, h.slot.host
	}
	m.mu.Unlock()
	if h == nil {
		return false
	}
	if !p.offline() || p.AllowsHost(name) {
		return true
	}
	kind, rule := p.offlineRule()
	m.sample(loggedPacket{kind: kind, src: from, dst: netip.AddrPortFrom(gw, 53), protocol: proto, at: time.Now(),
		rule: fmt.Sprintf("%s (DNS query for %s not forwarded)", rule, printable(strings.TrimSuffix(name, ".")))})
	return false
}

// printable is s cut to a DNS name's length with anything but printable ASCII as '?': a
// query name is the sandbox's to choose, and it ends up in events and on terminals.
func printable(s string) string {
	b := []byte(s[:min(len(s), 253)])
	for i, c := range b {
		if c < 0x20 || c > 0x7e {
			b[i] = '?'
		}
	}
	return string(b)
}
