package egress

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/cove-dev/cove/internal/errdefs"
)

// ErrInvalid marks a policy a caller must fix: the message names the field.
var ErrInvalid = errdefs.New(errdefs.ErrInvalidArgument, "invalid network policy")

// MaxRules bounds allowOut plus denyOut of one sandbox.
const MaxRules = 1000

// Policy is one sandbox's egress policy, E2B's network config: allowOut entries win over
// denyOut entries; what neither names is allowed when AllowInternet is true. A sandbox never
// reaches the host, another sandbox or link-local addresses (169.254.0.0/16, cloud metadata)
// unless an allowOut entry names them (the host and other sandboxes: never).
type Policy struct {
	// AllowInternet is E2B's allow_internet_access: false is denyOut 0.0.0.0/0.
	AllowInternet bool
	// AllowOut and DenyOut are CIDRs (a bare address is its /32).
	AllowOut []netip.Prefix
	DenyOut  []netip.Prefix
	// AllowHosts are allowOut's hostnames, lower-case: "example.com" or "*.example.com"
	// (any depth of subdomain, not the apex). A sandbox may reach the addresses Cove's
	// resolver answered it for a matching name, and no others: an address record counts
	// only when its own name matches, so a CNAME to a name not allowed opens nothing.
	AllowHosts []string
	// EgressProxy, when set, carries the sandbox's outbound TCP (after the rules above); its
	// other traffic but DNS is refused.
	EgressProxy *Proxy
	// Transforms set headers on the sandbox's HTTP and HTTPS requests to matching hosts, on
	// the host side (E2B's network.rules); its TCP to ports 80 and 443 goes through Cove.
	Transforms []Transform
	// Team owns the secrets the transforms' placeholders (${e2b.secrets.NAME}) name.
	Team string
}

// OpenPolicy is a sandbox's policy when its create names no rules.
var OpenPolicy = Policy{AllowInternet: true}

// IsOpen reports whether p is OpenPolicy.
func (p Policy) IsOpen() bool {
	return p.AllowInternet && len(p.AllowOut) == 0 && len(p.DenyOut) == 0 && len(p.AllowHosts) == 0 && p.EgressProxy == nil &&
		len(p.Transforms) == 0
}

// AllowsHost reports whether name (any case, with or without the final dot) matches one of
// p's hostnames: exactly, or as a subdomain of a "*." one.
func (p Policy) AllowsHost(name string) bool {
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	for _, h := range p.AllowHosts {
		if suffix, ok := strings.CutPrefix(h, "*"); ok {
			if strings.HasSuffix(name, suffix) && len(name) > len(suffix) {
				return true
			}
		} else if name == h {
			return true
		}
	}
	return false
}

// AllowOutStrings renders allowOut as E2B echoes it: CIDRs, then hostnames.
func (p Policy) AllowOutStrings() []string { return append(Strings(p.AllowOut), p.AllowHosts...) }

// Spec is a policy as a client writes it (the REST body's fields), before parsing.
type Spec struct {
	AllowInternet *bool
	AllowOut      []string
	DenyOut       []string
	EgressProxy   *Proxy
	// Rules are E2B's network.rules: host pattern -> the headers of its transforms.
	Rules map[string][]map[string]string
}

// ParsePolicy validates a client's spec; defaultAllow is AllowInternet when the spec leaves it
// out. Errors wrap ErrInvalid and name the field (network.allowOut[3]).
func ParsePolicy(s Spec, defaultAllow bool) (Policy, error) {
	p := Policy{AllowInternet: defaultAllow}
	if s.AllowInternet != nil {
		p.AllowInternet = *s.AllowInternet
	}
	if n := len(s.AllowOut) + len(s.DenyOut); n > MaxRules {
		return Policy{}, fmt.Errorf("%w: network.allowOut and network.denyOut hold %d entries, more than %d", ErrInvalid, n, MaxRules)
	}
	for i, e := range s.AllowOut {
		e = strings.TrimSpace(e)
		pfx, err := parsePrefix(e)
		if err == nil {
			p.AllowOut = append(p.AllowOut, pfx)
			continue
		}
		if looksLikeName(e) {
			var h string
			if h, err = parseHostname(e); err == nil {
				p.AllowHosts = append(p.AllowHosts, h)
				continue
			}
		}
		return Policy{}, fmt.Errorf("%w: network.allowOut[%d] %q: %v", ErrInvalid, i, e, err)
	}
	var err error
	for i, e := range s.DenyOut {
		if _, err := parsePrefix(strings.TrimSpace(e)); err != nil && looksLikeName(strings.TrimSpace(e)) {
			return Policy{}, fmt.Errorf("%w: network.denyOut[%d] %q: hostnames are not supported in denyOut, only CIDRs and addresses", ErrInvalid, i, e)
		}
	}
	if p.DenyOut, err = parsePrefixes("network.denyOut", s.DenyOut); err != nil {
		return Policy{}, err
	}
	if len(s.Rules) > MaxRules {
		return Policy{}, fmt.Errorf("%w: network.rules holds %d hosts, more than %d", ErrInvalid, len(s.Rules), MaxRules)
	}
	for pattern, rules := range s.Rules {
		h, err := parseHostname(pattern)
		if err != nil {
			return Policy{}, fmt.Errorf("%w: network.rules[%q]: %v", ErrInvalid, pattern, err)
		}
		t := Transform{Pattern: h, Headers: map[string]string{}}
		for i, headers := range rules {
			for k, v := range headers {
				if !validHeaderName(k) || strings.ContainsAny(v, "\r\n\x00") {
					return Policy{}, fmt.Errorf("%w: network.rules[%q][%d].transform.headers[%q]: not a valid header name and value", ErrInvalid, pattern, i, k)
				}
				if strings.Contains(placeholder.ReplaceAllString(v, ""), "${e2b.") {
					return Policy{}, fmt.Errorf("%w: network.rules[%q][%d].transform.headers[%q]: a ${e2b.…} that is not ${e2b.secrets.NAME} or ${e2b.identity.tokens.NAME}; it would be sent as written", ErrInvalid, pattern, i, k)
				}
				t.Headers[k] = v
			}
		}
		p.Transforms = append(p.Transforms, t)
	}
	if s.EgressProxy != nil {
		if err := parseEgressProxy("network.egressProxy", s.EgressProxy, false); err != nil {
			return Policy{}, err
		}
		proxy := *s.EgressProxy
		p.EgressProxy = &proxy
	}
	return p, nil
}

// looksLikeName: has a letter or '*', so it is meant as a hostname rather than an address.
func looksLikeName(s string) bool {
	return strings.ContainsFunc(s, func(r rune) bool { return r == '*' || (r|0x20 >= 'a' && r|0x20 <= 'z') }) &&
		!strings.Contains(s, ":") && !strings.Contains(s, "/")
}

// parseHostname checks a DNS name with an optional leading "*." and lower-cases it.
func parseHostname(s string) (string, error) {
	s = strings.ToLower(strings.TrimSuffix(s, "."))
	rest := strings.TrimPrefix(s, "*.")
	if rest == "" || s == "*" {
		return "", errors.New(`a bare "*" is not a hostname: use 0.0.0.0/0 for all traffic`)
	}
	if len(rest) > 253 {
		return "", errors.New("longer than 253 characters")
	}
	for _, label := range strings.Split(rest, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return "", errors.New("not a hostname (labels of 1 to 63 of [a-z0-9-], a leading *. allowed)")
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
				return "", errors.New("not a hostname (labels of 1 to 63 of [a-z0-9-], a leading *. allowed)")
			}
		}
	}
	return s, nil
}

func parsePrefixes(field string, in []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(in))
	for i, s := range in {
		p, err := parsePrefix(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("%w: %s[%d] %q: %v", ErrInvalid, field, i, s, err)
		}
		out = append(out, p)
	}
	return out, nil
}

func parsePrefix(s string) (netip.Prefix, error) {
	if s == "" {
		return netip.Prefix{}, errors.New("empty entry")
	}
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, errors.New("not a CIDR block")
		}
		if !p.Addr().Is4() {
			return netip.Prefix{}, errors.New("only IPv4 is supported (sandboxes have no IPv6 egress)")
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, errors.New("not an IP address, CIDR block or hostname")
	}
	if !a.Is4() {
		return netip.Prefix{}, errors.New("only IPv4 is supported (sandboxes have no IPv6 egress)")
	}
	return netip.PrefixFrom(a, 32), nil
}

// Strings renders prefixes the way E2B echoes them ("1.2.3.4/32" for an address).
func Strings(ps []netip.Prefix) []string {
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.String())
	}
	return out
}

// validHeaderName: an HTTP token.
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r > 127 || !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("!#$%&'*+-.^_`|~", r)) {
			return false
		}
	}
	return true
}

// Secrets are the values a policy carries that must never be logged: the proxy password and
// the transforms' header values.
func (p Policy) Secrets() []string {
	var out []string
	if p.EgressProxy != nil && p.EgressProxy.Password != "" {
		out = append(out, p.EgressProxy.Password)
	}
	for _, t := range p.Transforms {
		for _, v := range t.Headers {
			if v != "" {
				out = append(out, v)
			}
		}
	}
	return out
}

// offline reports whether p gives no internet access: allowInternetAccess false, or denyOut
// entries that together cover every address (denyOut 0.0.0.0/0). Such a sandbox gets no
// upstream DNS but for its allowed hostnames: a query is itself a message out.
func (p Policy) offline() bool {
	return !p.AllowInternet || coversAll(p.DenyOut)
}

// offlineRule names the rule that makes p offline, in the user's words.
func (p Policy) offlineRule() (DenyKind, string) {
	if !p.AllowInternet {
		return DenyNoNet, "allowInternetAccess false"
	}
	for _, d := range p.DenyOut {
		if d.Bits() == 0 {
			return DenyOut, "denyOut " + d.String()
		}
	}
	return DenyOut, "denyOut " + join(p.DenyOut)
}

// coversAll reports whether the IPv4 prefixes together hold every address.
func coversAll(ps []netip.Prefix) bool {
	type span struct{ lo, hi uint64 }
	spans := make([]span, 0, len(ps))
	for _, p := range ps {
		if !p.Addr().Is4() {
			continue
		}
		a := p.Masked().Addr().As4()
		lo := uint64(a[0])<<24 | uint64(a[1])<<16 | uint64(a[2])<<8 | uint64(a[3])
		spans = append(spans, span{lo, lo + 1<<(32-p.Bits())})
	}
	slices.SortFunc(spans, func(a, b span) int { return cmp.Compare(a.lo, b.lo) })
	var next uint64 // the first address not covered yet
	for _, s := range spans {
		if s.lo > next {
			return false
		}
		next = max(next, s.hi)
	}
	return next == 1<<32
}

// MergePrefixes drops every prefix another one of the list contains.
func MergePrefixes(in []netip.Prefix) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(in))
outer:
	for i, p := range in {
		for j, q := range in {
			if i != j && q.Bits() <= p.Bits() && q.Contains(p.Addr()) && (q.Bits() < p.Bits() || j < i) {
				continue outer
			}
		}
		out = append(out, p)
	}
	return out
}

// join renders prefixes for a person, those another one contains left out.
func join(ps []netip.Prefix) string { return strings.Join(Strings(MergePrefixes(ps)), ", ") }
