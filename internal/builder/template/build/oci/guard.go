package oci

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/cove-dev/cove/internal/errdefs"
)

// ErrRefused is a pull that would connect to an address its Guard forbids.
var ErrRefused = errdefs.New(errdefs.ErrPermissionDenied, "registry address refused")

// Guard is what a pull may connect to. A pull runs on the host, so without one a registry
// name could point it at the host's own services, the cloud metadata address or anything
// sandboxes may not reach. Every address a registry (or a blob redirect) resolves to is
// checked when it is dialled, after DNS, so a name that resolves anew cannot get past it.
//
// The zero Guard refuses loopback, link-local, unspecified and multicast addresses and the
// host's own; Limit and Allows narrow that further. Registries lifts every check for the
// registries an operator names.
type Guard struct {
	// Registries are HOST or HOST:PORT an operator allows whatever they resolve to
	// (--registry-allow): a HOST matches any port.
	Registries []string
	// Limit, when set, is all a pull may reach: the server's egress limit.
	Limit []netip.Prefix
	// Allows reports whether the team's egress policy lets it reach addr for host; nil
	// allows anything the rules above do.
	Allows func(host string, addr netip.Addr) bool
}

// allowed reports whether the operator allows the registry at hostport (host:port).
func (g Guard) allowed(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = hostport
	}
	for _, r := range g.Registries {
		r = strings.ToLower(r)
		if r == strings.ToLower(hostport) || r == strings.ToLower(host) {
			return true
		}
	}
	return false
}

// check reports, as ErrRefused, why a pull may not connect to addr for host.
func (g Guard) check(host string, addr netip.Addr) error {
	addr = addr.Unmap()
	why := ""
	switch {
	case addr.IsLoopback():
		why = "a loopback address"
	case addr.IsLinkLocalUnicast() || addr.IsLinkLocalMulticast():
		why = "a link-local address"
	case addr.IsUnspecified():
		why = "the unspecified address"
	case addr.IsMulticast():
		why = "a multicast address"
	case hostAddr(addr):
		why = "an address of this host"
	case len(g.Limit) > 0 && !slices.ContainsFunc(g.Limit, func(p netip.Prefix) bool { return p.Contains(addr) }):
		why = "outside the server's egress limit"
	case g.Allows != nil && !g.Allows(host, addr):
		why = "denied by the team's egress policy"
	}
	if why == "" {
		return nil
	}
	return fmt.Errorf("%w: registry %s resolves to %s, %s (an operator allows a registry with --registry-allow)", ErrRefused, host, addr, why)
}

// hostAddr reports whether addr is one of this host's interface addresses.
func hostAddr(addr netip.Addr) bool {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return true // unknown: refuse rather than risk the host
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap() == addr {
				return true
			}
		}
	}
	return false
}

// Check resolves the registry of ref (host or host:port) and reports, as ErrRefused, an
// address the pull may not reach: a build names a refused registry before it starts.
func (g Guard) Check(ctx context.Context, registry string) error {
	_, err := g.resolve(ctx, registry)
	return err
}

// resolve returns the addresses of hostport the pull may dial, or why it may not.
func (g Guard) resolve(ctx context.Context, hostport string) ([]netip.Addr, error) {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = hostport
	}
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, fmt.Errorf("registry %s: %w", host, err)
	}
	if g.allowed(hostport) {
		return addrs, nil
	}
	for _, a := range addrs {
		if err := g.check(host, a); err != nil {
			return nil, err // one refused address refuses the name: no falling back around it
		}
	}
	return addrs, nil
}

// Transport is an HTTP transport whose every connection passes g: it dials the addresses it
// checked, never the name again.
func (g Guard) Transport() http.RoundTripper {
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil // a proxy from the environment would dial for us, unchecked
	t.DialContext = func(ctx context.Context, network, hostport string) (net.Conn, error) {
		_, port, err := net.SplitHostPort(hostport)
		if err != nil {
			return nil, err
		}
		addrs, err := g.resolve(ctx, hostport)
		if err != nil {
			return nil, err
		}
		var errs []error
		for _, a := range addrs {
			c, err := d.DialContext(ctx, network, net.JoinHostPort(a.String(), port))
			if err == nil {
				return c, nil
			}
			errs = append(errs, err)
		}
		return nil, errors.Join(errs...)
	}
	return t
}
