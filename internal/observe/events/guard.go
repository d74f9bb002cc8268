package events

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"time"
)

// ErrForbiddenAddress is a webhook host that resolves only to addresses deliveries may not
// reach: loopback, link-local, private, unique-local, shared, unspecified, multicast, or the
// server's own, unless the operator allowed them (Config.AllowNets).
var ErrForbiddenAddress = errors.New("webhook address not allowed")

// forbiddenNets are refused besides what netip's predicates name.
var forbiddenNets = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),     // "this network"
	netip.MustParsePrefix("100.64.0.0/10"), // shared (carrier-grade NAT)
	netip.MustParsePrefix("192.0.0.0/24"),  // IETF protocol assignments
	netip.MustParsePrefix("240.0.0.0/4"),   // reserved, and broadcast
	netip.MustParsePrefix("64:ff9b::/96"),  // NAT64: would reach the IPv4 ranges above
}

// guard decides which addresses a delivery may connect to.
type guard struct {
	allow    []netip.Prefix
	resolver *net.Resolver
	own      func() []netip.Addr // the server's own addresses
}

// allowed says a delivery may connect to a.
func (g *guard) allowed(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range g.allow {
		if p.Contains(a) {
			return true
		}
	}
	if !a.IsValid() || a.IsLoopback() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() ||
		a.IsInterfaceLocalMulticast() || a.IsMulticast() || a.IsPrivate() || a.IsUnspecified() {
		return false
	}
	for _, p := range forbiddenNets {
		if p.Contains(a) {
			return false
		}
	}
	for _, own := range g.own() {
		if own == a {
			return false
		}
	}
	return true
}

// dial resolves the host now, at delivery time, and connects to the first allowed address:
// the connection is pinned to an address this check passed, so a DNS answer that changes
// between a check and a connect (rebinding) cannot redirect it.
func (g *guard) dial(ctx context.Context, network, hostport string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return nil, err
	}
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else if addrs, err = g.resolver.LookupNetIP(ctx, "ip", host); err != nil {
		return nil, err
	}
	var refused []string
	var d net.Dialer
	var lastErr error
	for _, a := range addrs {
		if !g.allowed(a) {
			refused = append(refused, a.String())
			continue
		}
		c, err := d.DialContext(ctx, network, net.JoinHostPort(a.Unmap().String(), port))
		if err == nil {
			return c, nil
		}
		lastErr = err
	}
	if lastErr != nil {
		return nil, lastErr
	}
	return nil, fmt.Errorf("%w: %s resolves to %v (loopback, link-local, private, unique-local or this server's own); "+
		"an operator can allow ranges with cove server --webhook-allow-net", ErrForbiddenAddress, host, refused)
}

// ownAddresses lists this machine's interface addresses.
func ownAddresses() []netip.Addr {
	ifaddrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	out := make([]netip.Addr, 0, len(ifaddrs))
	for _, a := range ifaddrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, p.Addr().Unmap())
		}
	}
	return out
}

// deliveryClient is the default client: it dials through g, follows no redirect (a 3xx is
// the receiver's answer, recorded as it is) and uses no proxy from the environment.
func deliveryClient(g *guard) *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			DialContext:           g.dial,
			ForceAttemptHTTP2:     true,
			MaxIdleConnsPerHost:   4,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   10 * time.Second,
			ExpectContinueTimeout: time.Second,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}
