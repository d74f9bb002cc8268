package egress

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// A sandbox's policy is one ordered list of steps (Steps), which both enforcers read: the
// table renders it as the sandbox's chain (internal/sandbox/network's sandboxScript), and Cove's own
// proxies (the egress proxy and the header-rule interceptor, which dial from the host and so
// pass no forward chain) evaluate it in Go (decide). Whatever the table refuses, they refuse.

// linkLocal is never reachable unless an allowOut entry names it: cloud metadata lives there.
var linkLocal = netip.MustParsePrefix("169.254.0.0/16")

// Matcher is what one step matches on. The set is closed.
type Matcher int

// The matchers.
const (
	MatchOutside Matcher = iota + 1 // the destination is in none of the prefixes
	MatchIn                         // the destination is in one of the prefixes
	MatchHost                       // the destination is one of the host's own addresses
	MatchLearned                    // the resolver answered the sandbox the destination for an allowed name
	MatchAll                        // every destination
)

// Step is one rule of a sandbox's policy: what it matches and its verdict, "" to accept or
// the kind of the refusal.
type Step struct {
	Match    Matcher
	Prefixes []netip.Prefix // for MatchOutside and MatchIn
	Deny     DenyKind
}

// Steps is p in the order it applies: the server's egress limit, the host's own services
// and other sandboxes (never reachable, whatever the rules), allowOut (CIDRs, then the names
// the resolver answered), denyOut, link-local, then internet access on or off.
func (e *Enforcer) Steps(p Policy) []Step {
	var out []Step
	if len(e.cfg.EgressLimit) > 0 {
		out = append(out, Step{Match: MatchOutside, Prefixes: e.cfg.EgressLimit, Deny: DenyLimit})
	}
	out = append(out, Step{Match: MatchHost, Deny: DenyHost},
		Step{Match: MatchIn, Prefixes: []netip.Prefix{e.cfg.Pool}, Deny: DenyLinkLocal})
	if len(p.AllowOut) > 0 {
		out = append(out, Step{Match: MatchIn, Prefixes: p.AllowOut})
	}
	if len(p.AllowHosts) > 0 {
		out = append(out, Step{Match: MatchLearned})
	}
	if len(p.DenyOut) > 0 {
		out = append(out, Step{Match: MatchIn, Prefixes: p.DenyOut, Deny: DenyOut})
	}
	out = append(out, Step{Match: MatchIn, Prefixes: []netip.Prefix{linkLocal}, Deny: DenyLinkLocal})
	if p.AllowInternet {
		return append(out, Step{Match: MatchAll})
	}
	return append(out, Step{Match: MatchAll, Deny: DenyNoNet})
}

// decide applies h's policy to dst as the table does (Steps): the kind of the refusal, or
// ok. Cove's proxies call it for every destination they dial for a sandbox.
func (e *Enforcer) decide(h *sandbox, dst netip.Addr) (DenyKind, bool) {
	return e.decideNamed(h, dst, "")
}

// decideNamed is decide for an address of an A record named name that Cove's own lookup
// answered (a header rule's host): when name is one of the sandbox's allowed hostnames, the
// address counts as one the resolver answered the sandbox (as there, the record's own name
// must match: a CNAME to a name not allowed opens nothing).
func (e *Enforcer) decideNamed(h *sandbox, dst netip.Addr, name string) (DenyKind, bool) {
	e.mu.Lock()
	p := h.policy
	l, learned := h.learned[dst]
	e.mu.Unlock()
	learned = learned && time.Now().Before(l.until) || name != "" && p.AllowsHost(name)
	for _, s := range e.Steps(p) {
		var hit bool
		switch s.Match {
		case MatchOutside:
			hit = !containsAny(s.Prefixes, dst)
		case MatchIn:
			hit = containsAny(s.Prefixes, dst)
		case MatchHost:
			hit = hostOwns(dst)
		case MatchLearned:
			hit = learned
		case MatchAll:
			hit = true
		}
		if hit {
			return s.Deny, s.Deny == ""
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
func (e *Enforcer) permitQuery(from netip.Addr, name, proto string) bool {
	h, p := e.lookup(from)
	if h == nil {
		return false
	}
	gw := h.gateway
	if !p.offline() || p.AllowsHost(name) {
		return true
	}
	kind, rule := p.offlineRule()
	e.sample(loggedPacket{kind: kind, src: from, dst: netip.AddrPortFrom(gw, 53), protocol: proto, at: time.Now(),
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
