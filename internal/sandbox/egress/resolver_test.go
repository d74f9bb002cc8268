package egress_test

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/cove-dev/cove/internal/sandbox/egress"
	"github.com/cove-dev/cove/internal/sandbox/network/nettest"
)

// TestDNSIsNoWayOutWithoutInternet: a query is itself a message out (a name under an
// attacker's zone reaches the attacker's name server), so a sandbox without internet access
// gets answers for its allowed hostnames only; every other query is refused before it goes
// upstream, and reported.
func TestDNSIsNoWayOutWithoutInternet(t *testing.T) {
	in := nettest.New(t)
	in.SetName("web.test", in.Addr)
	in.SetName("open.leak.test", in.Other)
	m, denied := startManager(t, in, nil)
	everything := []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}
	halves := []netip.Prefix{netip.MustParsePrefix("0.0.0.0/1"), netip.MustParsePrefix("128.0.0.0/1")}
	n := 0
	for _, tc := range []struct {
		name string
		p    egress.Policy
		kind egress.DenyKind
		rule string
	}{
		{"allowInternetAccess false", egress.Policy{AllowInternet: false, AllowHosts: []string{"web.test"}}, egress.DenyNoNet, "allowInternetAccess false"},
		{"denyOut 0.0.0.0/0", egress.Policy{AllowInternet: true, DenyOut: everything, AllowHosts: []string{"web.test"}}, egress.DenyOut, "denyOut 0.0.0.0/0"},
		{"denyOut entries that together cover every address", egress.Policy{AllowInternet: true, DenyOut: halves, AllowHosts: []string{"web.test"}}, egress.DenyOut, "denyOut 0.0.0.0/1, 128.0.0.0/1"},
	} {
		t.Run("a sandbox with "+tc.name+" sends no other query upstream", func(t *testing.T) {
			n++
			id := "sb-dns-" + string(rune('a'+n))
			a := attach(t, m, id, tc.p)
			if got, _ := lookup(t, a, "web.test"); got != in.Addr {
				t.Fatalf("the allowed name web.test = %v, want %v", got, in.Addr)
			}
			secret := "c2VjcmV0-" + string(rune('a'+n)) + ".leak.test"
			if got, rcode := lookup(t, a, secret); got.IsValid() || rcode != dnsmessage.RCodeRefused {
				t.Fatalf("%s = %v (%v), want REFUSED", secret, got, rcode)
			}
			if slices.Contains(in.Queries(), secret) {
				t.Fatalf("the upstream was asked for %s", secret)
			}
			d := waitDenied(t, denied, id, func(d egress.Denied) bool { return strings.Contains(d.Rule, secret) })
			if d.Kind != tc.kind || !strings.HasPrefix(d.Rule, tc.rule+" ") || d.Dst != netip.AddrPortFrom(a.Gateway, 53) {
				t.Fatalf("reported %+v, want kind %s, rule %q, destination %s:53", d, tc.kind, tc.rule, a.Gateway)
			}
		})
	}
	t.Run("a sandbox with internet access resolves any name (the test can fail)", func(t *testing.T) {
		a := attach(t, m, "sb-dns-open", egress.Policy{AllowInternet: true, DenyOut: halves[:1]})
		if got, _ := lookup(t, a, "open.leak.test"); got != in.Other {
			t.Fatalf("open.leak.test = %v, want %v", got, in.Other)
		}
		if !slices.Contains(in.Queries(), "open.leak.test") {
			t.Fatal("the upstream was not asked")
		}
	})
}
