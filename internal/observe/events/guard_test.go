package events

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
	"time"

	"github.com/cove-dev/cove/internal/store"
)

func TestGuardRefusesInternalAddresses(t *testing.T) {
	t.Parallel()
	own := netip.MustParseAddr("203.0.113.7") // stands for one of the server's interface addresses
	g := &guard{own: func() []netip.Addr { return []netip.Addr{own} }}
	allowLoopback := &guard{own: g.own, allow: loopback}
	tests := []struct {
		name string
		g    *guard
		addr string
		want bool
	}{
		{"loopback is refused", g, "127.0.0.1", false},
		{"IPv6 loopback is refused", g, "::1", false},
		{"loopback mapped into IPv6 is refused", g, "::ffff:127.0.0.1", false},
		{"the cloud metadata address (link-local) is refused", g, "169.254.169.254", false},
		{"IPv6 link-local is refused", g, "fe80::1", false},
		{"10/8 is refused", g, "10.1.2.3", false},
		{"172.16/12 is refused", g, "172.31.0.1", false},
		{"192.168/16 is refused", g, "192.168.0.1", false},
		{"unique-local is refused", g, "fd00::1", false},
		{"shared address space is refused", g, "100.64.0.1", false},
		{"the unspecified address is refused", g, "0.0.0.0", false},
		{"NAT64 of a private address is refused", g, "64:ff9b::a00:1", false},
		{"the server's own address is refused", g, own.String(), false},
		{"a public address is allowed", g, "192.0.2.1", true},
		{"loopback is allowed when the operator allows it", allowLoopback, "127.0.0.1", true},
		{"the allow option covers only its range", allowLoopback, "10.0.0.1", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.g.allowed(netip.MustParseAddr(tt.addr)); got != tt.want {
				t.Errorf("allowed(%s) = %v, want %v", tt.addr, got, tt.want)
			}
		})
	}
}

func TestDeliveriesCannotBeTurnedAgainstTheNetwork(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.URL.Path == "/redirect" {
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
		}
	}))
	t.Cleanup(srv.Close)
	deliver := func(t *testing.T, url string, allow []netip.Prefix) *store.Delivery {
		return deliverKilled(t, url, "s", allow)
	}
	t.Run("a receiver on the loopback is refused once, not retried, and never reached", func(t *testing.T) {
		before := hits.Load()
		d := deliver(t, srv.URL, nil)
		if d.State != store.DeliveryFailed || len(d.History) != 1 || d.History[0].ErrorClass != ErrorForbidden ||
			!strings.Contains(d.History[0].Error, "--webhook-allow-net") {
			t.Errorf("delivery %+v, attempts %+v", d, d.History)
		}
		if hits.Load() != before {
			t.Error("the loopback receiver was reached")
		}
	})
	t.Run("a name that resolves to the loopback is refused as well", func(t *testing.T) {
		d := deliver(t, strings.Replace(srv.URL, "127.0.0.1", "localhost", 1), nil)
		if d.State != store.DeliveryFailed || d.History[0].ErrorClass != ErrorForbidden {
			t.Errorf("attempts %+v", d.History)
		}
	})
	t.Run("a redirect is not followed but recorded as the receiver's answer", func(t *testing.T) {
		before := hits.Load()
		d := deliver(t, srv.URL+"/redirect", loopback)
		if d.State != store.DeliveryFailed || len(d.History) != 1 || d.History[0].StatusCode != http.StatusFound {
			t.Errorf("delivery %+v, attempts %+v", d, d.History)
		}
		if n := hits.Load() - before; n != 1 {
			t.Errorf("the receiver saw %d requests, want 1 (no redirect followed)", n)
		}
	})
	t.Run("the guard's error names the refused addresses", func(t *testing.T) {
		g := &guard{own: ownAddresses}
		_, err := g.dial(context.Background(), "tcp", "127.0.0.1:9")
		if !errors.Is(err, ErrForbiddenAddress) || !strings.Contains(err.Error(), "127.0.0.1") {
			t.Errorf("dial: %v", err)
		}
	})
}

// fakeDNS answers A queries on the loopback with answers[0], then answers[1] for every later
// one (a rebinding name), and AAAA queries with nothing: a resolver Cove does not own.
func fakeDNS(t *testing.T, answers [2]netip.Addr) *net.Resolver {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	var asked atomic.Int32
	go func() {
		buf := make([]byte, 512)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			q := buf[:n]
			end := 12 // the question: labels, then type and class
			for end < len(q) && q[end] != 0 {
				end += int(q[end]) + 1
			}
			end += 5
			if n < 12 || end > n {
				continue
			}
			qtype := int(q[end-4])<<8 | int(q[end-3])
			resp := append([]byte{q[0], q[1], 0x81, 0x80, 0, 1, 0, 0, 0, 0, 0, 0}, q[12:end]...)
			if qtype == 1 { // A
				a := answers[min(int(asked.Add(1))-1, 1)].As4()
				resp[7] = 1
				resp = append(resp, 0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 0, 0, 4)
				resp = append(resp, a[:]...)
			}
			_, _ = pc.WriteTo(resp, from)
		}
	}()
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", pc.LocalAddr().String())
	}}
}

func TestTheConnectionIsPinnedToTheAddressTheCheckPassed(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.2:0") // the allowed receiver; nothing listens on 127.0.0.1 at its port
	if err != nil {
		t.Skipf("no 127.0.0.2 on this loopback: %v", err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	g := &guard{allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")}, own: func() []netip.Addr { return nil },
		resolver: fakeDNS(t, [2]netip.Addr{netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("127.0.0.1")})}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := g.dial(ctx, "tcp", "rebind.test:"+port)
	if err != nil {
		t.Fatalf("the first answer (allowed) was not dialled: %v", err)
	}
	if got := c.RemoteAddr().String(); got != ln.Addr().String() {
		t.Errorf("connected to %s, want the checked %s: one resolution serves the check and the connect", got, ln.Addr())
	}
	c.Close()
	if _, err := g.dial(ctx, "tcp", "rebind.test:"+port); !errors.Is(err, ErrForbiddenAddress) {
		t.Errorf("after the name rebound to the loopback: %v, want ErrForbiddenAddress", err)
	}
}
