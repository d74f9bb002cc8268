package egress_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/cove-dev/cove/internal/sandbox/egress"
	"github.com/cove-dev/cove/internal/sandbox/network"
	"github.com/cove-dev/cove/internal/sandbox/network/nettest"
)

func TestEgressProxy(t *testing.T) {
	in := nettest.New(t)
	socks, stopSOCKS, err := in.StartSOCKS()
	if err != nil {
		t.Fatal(err)
	}
	m := newManager(t, in, -1)
	proxy := &egress.Proxy{Address: socks.String(), Username: nettest.SOCKSUser, Password: nettest.SOCKSPassword}
	a := attach(t, m, "sb-proxied", egress.Policy{AllowInternet: true, EgressProxy: proxy,
		DenyOut: []netip.Prefix{netip.PrefixFrom(in.Addr, 32)}})
	other := "http://" + in.Other.String() + "/"
	t.Run("TCP goes through the SOCKS5 proxy, not direct", func(t *testing.T) {
		if _, err := nettest.Get(a.Netns, other); err != nil {
			t.Fatal(err)
		}
		if c := in.SOCKSConnects(); len(c) != 1 || c[0] != in.Other.String()+":80" {
			t.Fatalf("the proxy connected to %v, want [%s:80]", c, in.Other)
		}
		reqs := in.Requests()
		if host, _, _ := net.SplitHostPort(reqs[len(reqs)-1].RemoteAddr); host == in.Gateway.String() {
			t.Fatalf("the request came from the host's NAT address %s: it did not go through the proxy", host)
		}
	})
	t.Run("the sandbox's rules apply before the proxy", func(t *testing.T) {
		if _, err := nettest.Get(a.Netns, in.URL("http", "/")); err == nil {
			t.Fatal("a denied destination answered through the proxy")
		}
		if c := in.SOCKSConnects(); len(c) != 1 {
			t.Fatalf("the proxy was asked for a denied destination: %v", c)
		}
	})
	t.Run("a flow to an address an allowed name resolved to asks the proxy for the name", func(t *testing.T) {
		in.SetName("web.test", in.Addr)
		p := egress.Policy{AllowInternet: false, AllowHosts: []string{"web.test"}, EgressProxy: proxy}
		if err := m.Update(context.Background(), "sb-proxied", p); err != nil {
			t.Fatal(err)
		}
		if got, _ := lookup(t, a, "web.test"); got != in.Addr {
			t.Fatalf("web.test = %v", got)
		}
		if _, err := nettest.Get(a.Netns, in.URL("http", "/")); err != nil {
			t.Fatal(err)
		}
		if c := in.SOCKSConnects(); c[len(c)-1] != "web.test:80" {
			t.Fatalf("the proxy was asked for %v, want web.test:80 last", c)
		}
	})
	t.Run("a wrong password fails closed", func(t *testing.T) {
		bad := *proxy
		bad.Password = "wrong"
		if err := m.Update(context.Background(), "sb-proxied", egress.Policy{AllowInternet: true, EgressProxy: &bad}); err != nil {
			t.Fatal(err)
		}
		before := len(in.Requests())
		if _, err := nettest.Get(a.Netns, other); err == nil {
			t.Fatal("the request went through with a password the proxy refuses")
		}
		if len(in.Requests()) != before {
			t.Fatal("the request reached the host without the proxy")
		}
	})
	t.Run("with the proxy down, nothing goes out direct", func(t *testing.T) {
		if err := m.Update(context.Background(), "sb-proxied", egress.Policy{AllowInternet: true, EgressProxy: proxy}); err != nil {
			t.Fatal(err)
		}
		stopSOCKS()
		before := len(in.Requests())
		if _, err := nettest.Get(a.Netns, other); err == nil {
			t.Fatal("the request went through with the proxy down")
		}
		if len(in.Requests()) != before {
			t.Fatal("the request reached the host without the proxy")
		}
	})
	t.Run("without the proxy the sandbox goes direct again", func(t *testing.T) {
		if err := m.Update(context.Background(), "sb-proxied", egress.Policy{AllowInternet: true}); err != nil {
			t.Fatal(err)
		}
		if _, err := nettest.Get(a.Netns, other); err != nil {
			t.Fatal(err)
		}
	})
}

func TestEgressProxyAddresses(t *testing.T) {
	in := nettest.New(t)
	srv := nettest.ReserveServer(t)
	m, err := network.New(context.Background(), network.Config{Pool: srv.Pool, Table: srv.Table, LinkPrefix: srv.LinkPrefix,
		LogGroup: srv.LogGroup, DNS: []netip.AddrPort{in.DNS()}, EgressLimit: []netip.Prefix{nettest.Range}, Warm: -1,
		StateDir: t.TempDir(), ForbidPrivateProxies: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	for _, addr := range []string{"10.1.2.3:1080", "127.0.0.1:1080", "192.168.0.9:1080"} {
		t.Run("a proxy at "+addr+" is refused when the operator forbids private ranges", func(t *testing.T) {
			p := egress.Policy{AllowInternet: true, EgressProxy: &egress.Proxy{Address: addr}}
			if _, err := m.Attach(context.Background(), "sb-"+addr, p); !errors.Is(err, egress.ErrInvalid) || !strings.Contains(err.Error(), "network.egressProxy.address") {
				t.Fatalf("attach: %v, want ErrInvalid naming network.egressProxy.address", err)
			}
		})
	}
}
