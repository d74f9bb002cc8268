package events

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

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
