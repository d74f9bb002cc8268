package network

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// ErrInvalid marks a policy a caller must fix: the message names the field.
var ErrInvalid = errors.New("invalid network policy")

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
}

// openPolicy is a sandbox's policy when its create names no rules.
var openPolicy = Policy{AllowInternet: true}

// open reports whether p is openPolicy.
func (p Policy) open() bool { return p.AllowInternet && len(p.AllowOut) == 0 && len(p.DenyOut) == 0 }

// Spec is a policy as a client writes it (the REST body's fields), before parsing.
type Spec struct {
	AllowInternet *bool
	AllowOut      []string
	DenyOut       []string
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
	var err error
	if p.AllowOut, err = parsePrefixes("network.allowOut", s.AllowOut); err != nil {
		return Policy{}, err
	}
	if p.DenyOut, err = parsePrefixes("network.denyOut", s.DenyOut); err != nil {
		return Policy{}, err
	}
	return p, nil
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
		return netip.Prefix{}, errors.New("not an IP address or CIDR block (hostnames are not supported by this server)")
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
