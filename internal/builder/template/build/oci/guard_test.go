package oci_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cove-dev/cove/internal/builder/template/build/oci"
)

// A pull runs on the host: the guard must keep it off the host's own services, the
// metadata address and anything the server's egress limit or the team's policy forbids,
// unless the operator allows the registry.
func TestGuardRefusesWhatAPullMayNotReach(t *testing.T) {
	ctx := context.Background()
	hostAddr := ""
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
				hostAddr = n.IP.String()
				break
			}
		}
	}
	limit := []netip.Prefix{netip.MustParsePrefix("198.18.0.0/15")}
	for _, c := range []struct {
		name, registry string
		guard          oci.Guard
		want           string // "" allowed, else a word of the refusal
	}{
		{"loopback is refused", "127.0.0.1:5000", oci.Guard{}, "loopback"},
		{"the IPv6 loopback is refused", "[::1]:5000", oci.Guard{}, "loopback"},
		{"the metadata address is refused", "169.254.169.254", oci.Guard{}, "link-local"},
		{"the unspecified address is refused", "0.0.0.0:80", oci.Guard{}, "unspecified"},
		{"multicast is refused", "239.1.2.3", oci.Guard{}, "multicast"},
		{"an address outside the egress limit is refused", "203.0.113.7", oci.Guard{Limit: limit}, "egress limit"},
		{"an address inside the egress limit is allowed", "198.18.0.9", oci.Guard{Limit: limit}, ""},
		{"the team's policy is followed", "198.18.0.9", oci.Guard{Limit: limit, Allows: func(string, netip.Addr) bool { return false }}, "team's egress policy"},
		{"a registry the operator allows is reached anywhere", "127.0.0.1:5000", oci.Guard{Registries: []string{"127.0.0.1:5000"}, Limit: limit}, ""},
		{"an allowed host matches any port", "127.0.0.1:5000", oci.Guard{Registries: []string{"127.0.0.1"}}, ""},
		{"another port of an allowed host:port is refused", "127.0.0.1:5001", oci.Guard{Registries: []string{"127.0.0.1:5000"}}, "loopback"},
		{"the host's own address is refused", net.JoinHostPort(hostAddr, "443"), oci.Guard{}, "this host"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if strings.HasPrefix(c.registry, ":") {
				t.Skip("this host has no address but loopback")
			}
			err := c.guard.Check(ctx, c.registry)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("Check(%s) = %v, want allowed", c.registry, err)
			case c.want != "" && (!errors.Is(err, oci.ErrRefused) || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("Check(%s) = %v, want ErrRefused saying %q", c.registry, err, c.want)
			}
		})
	}

	t.Run("the transport checks at dial time, so nothing is sent to a refused address", func(t *testing.T) {
		var hit atomic.Bool
		srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hit.Store(true) }))
		defer srv.Close()
		// A name, not an address: resolved when dialled.
		url := strings.Replace(srv.URL, "127.0.0.1", "localhost", 1)
		res, err := (&http.Client{Transport: oci.Guard{}.Transport()}).Get(url)
		if err == nil {
			res.Body.Close()
		}
		if !errors.Is(err, oci.ErrRefused) || hit.Load() {
			t.Fatalf("GET %s through the guard: %v (server reached: %v), want ErrRefused", url, err, hit.Load())
		}
		res, err = (&http.Client{Transport: oci.Guard{Registries: []string{strings.TrimPrefix(url, "http://")}}.Transport()}).Get(url)
		if err != nil {
			t.Fatalf("GET %s of an allowed registry: %v", url, err)
		}
		res.Body.Close()
	})
}
