package network_test

import (
	"context"
	"crypto/tls"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/network"
	"github.com/cove-dev/cove/internal/network/nettest"
)

// startManager starts a Manager on a reserved test pool whose sandboxes reach nothing but
// 198.18.0.0/15, resolving through in's DNS and trusting its HTTPS server; edit changes
// the config first. Refusals go to the returned channel.
func startManager(t *testing.T, in *nettest.Internet, edit func(*network.Config)) (*network.Manager, chan network.Denied) {
	t.Helper()
	srv := nettest.ReserveServer(t)
	denied := make(chan network.Denied, 100)
	cfg := network.Config{Pool: srv.Pool, Table: srv.Table, LinkPrefix: srv.LinkPrefix, LogGroup: srv.LogGroup,
		DNS: []netip.AddrPort{in.DNS()}, EgressLimit: []netip.Prefix{nettest.Range}, Warm: -1,
		StateDir: t.TempDir(), UpstreamCAs: in.CAPEM,
		OnDenied: func(_ context.Context, d network.Denied) {
			select {
			case denied <- d:
			default:
			}
		}}
	if edit != nil {
		edit(&cfg)
	}
	m, err := network.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	return m, denied
}

// waitDenied returns the first report for id that match accepts, or fails after a generous
// deadline.
func waitDenied(t *testing.T, denied chan network.Denied, id string, match func(network.Denied) bool) network.Denied {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case d := <-denied:
			if d.SandboxID == id && match(d) {
				return d
			}
		case <-deadline:
			t.Fatalf("no matching denied report for %s", id)
		}
	}
}

// countingListener accepts on addr (dialed through netns when it is not "") and counts the
// connections; each is answered with an HTTP 200 and closed.
func countingListener(t *testing.T, netns, addr string) *atomic.Int32 {
	t.Helper()
	var ln net.Listener
	var err error
	if netns == "" {
		ln, err = net.Listen("tcp4", addr)
	} else {
		ln, err = nettest.ListenIn(netns, "tcp4", addr)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var n atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(2 * time.Second))
				buf := make([]byte, 4096)
				_, _ = c.Read(buf)
				_, _ = c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 7\r\nConnection: close\r\n\r\nreached"))
			}()
		}
	}()
	return &n
}

// TestInterceptorRefusesWhatTheTableRefuses: a sandbox with header rules has its TCP to
// ports 80 and 443 redirected to Cove, which dials from the host; it must refuse every
// destination the table refuses, the host's own services and other sandboxes among them.
func TestInterceptorRefusesWhatTheTableRefuses(t *testing.T) {
	in := nettest.New(t)
	m, denied := startManager(t, in, nil)
	rules := []network.Transform{{Pattern: "web.test", Headers: map[string]string{"X-Rule": "1"}}}
	// allowOut names the whole pool: other sandboxes stay out of reach all the same.
	a := attach(t, m, "sb-int-a", network.Policy{AllowInternet: true, Transforms: rules, AllowOut: []netip.Prefix{m.Pool()}})
	b := attach(t, m, "sb-int-b", network.Policy{AllowInternet: true})
	hostHTTP := countingListener(t, "", net.JoinHostPort(in.Gateway.String(), "80"))
	hostTLS := countingListener(t, "", net.JoinHostPort(in.Gateway.String(), "443"))
	otherSandbox := countingListener(t, b.Netns, "0.0.0.0:80")

	t.Run("the interceptor passes an allowed destination through (the test can fail)", func(t *testing.T) {
		if _, err := get(a.Netns, "http://"+in.Other.String()+"/"); err != nil {
			t.Fatal(err)
		}
	})
	for _, tc := range []struct {
		name string
		dst  netip.AddrPort
		seen *atomic.Int32
		kind network.DenyKind
	}{
		{"plain HTTP to a service on the host's own address is refused", netip.AddrPortFrom(in.Gateway, 80), hostHTTP, network.DenyHost},
		{"TLS to a service on the host's own address is refused", netip.AddrPortFrom(in.Gateway, 443), hostTLS, network.DenyHost},
		{"plain HTTP to another sandbox is refused though allowOut names the pool", netip.AddrPortFrom(b.Addr, 80), otherSandbox, network.DenyLinkLocal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			c, err := nettest.DialIn(ctx, a.Netns, "tcp", tc.dst.String())
			if err == nil {
				_ = c.SetDeadline(time.Now().Add(3 * time.Second))
				if tc.dst.Port() == 443 {
					_ = tls.Client(c, &tls.Config{ServerName: "other.test", InsecureSkipVerify: true}).Handshake()
				} else {
					_, _ = c.Write([]byte("GET / HTTP/1.1\r\nHost: other.test\r\n\r\n"))
					_, _ = c.Read(make([]byte, 512))
				}
				c.Close()
			}
			if n := tc.seen.Load(); n != 0 {
				t.Fatalf("the service at %s accepted %d connections from the sandbox", tc.dst, n)
			}
			d := waitDenied(t, denied, "sb-int-a", func(d network.Denied) bool { return d.Dst == tc.dst })
			if d.Kind != tc.kind {
				t.Fatalf("refused as %+v, want kind %s", d, tc.kind)
			}
		})
	}
}
