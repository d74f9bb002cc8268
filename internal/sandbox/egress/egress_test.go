package egress_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/cove-dev/cove/internal/sandbox/egress"
	"github.com/cove-dev/cove/internal/sandbox/network"
	"github.com/cove-dev/cove/internal/sandbox/network/nettest"
)

// The package's tests start managers and attach sandboxes as egress's do (nettest).
var (
	newManager = nettest.Manager
	attach     = nettest.Attach
)

// lookup asks the resolver named in the sandbox's resolv.conf for name's A record.
func lookup(t *testing.T, a *network.Attachment, name string) (netip.Addr, dnsmessage.RCode) {
	t.Helper()
	return nettest.Lookup(t, a.Netns, a.ResolvConf, name)
}

func TestHostnameRules(t *testing.T) {
	in := nettest.New(t)
	in.SetName("web.test", in.Addr)
	in.SetName("other.test", in.Other)
	in.SetCNAME("alias.test", "other.test")
	in.SetName("x.apps.test", in.Addr)
	in.SetName("apps.test", in.Other)
	m := newManager(t, in, -1)
	web, other := in.URL("http", "/"), "http://"+in.Other.String()+"/"
	n := 0
	fresh := func(t *testing.T, hosts ...string) *network.Attachment {
		n++
		p, err := egress.ParsePolicy(egress.Spec{AllowInternet: new(bool), AllowOut: hosts}, false)
		if err != nil {
			t.Fatal(err)
		}
		return attach(t, m, fmt.Sprintf("sb-host-%d", n), p)
	}
	t.Run("an allowed name's address is reachable once Cove's resolver answered it", func(t *testing.T) {
		a := fresh(t, "web.test")
		if got, _ := lookup(t, a, "web.test"); got != in.Addr {
			t.Fatalf("web.test = %v", got)
		}
		if _, err := nettest.Get(a.Netns, web); err != nil {
			t.Fatal(err)
		}
		if _, err := nettest.Get(a.Netns, other); err == nil {
			t.Fatal("an address no allowed name resolved to answered")
		}
	})
	t.Run("the literal address of an allowed name is refused until the sandbox resolves the name", func(t *testing.T) {
		a := fresh(t, "web.test")
		if _, err := nettest.Get(a.Netns, web); err == nil {
			t.Fatal("the literal address answered before any lookup")
		}
	})
	t.Run("a CNAME from an allowed name to one not allowed opens nothing", func(t *testing.T) {
		a := fresh(t, "alias.test")
		if got, _ := lookup(t, a, "alias.test"); got != in.Other {
			t.Fatalf("alias.test = %v, want %v through the CNAME", got, in.Other)
		}
		if _, err := nettest.Get(a.Netns, other); err == nil {
			t.Fatal("the CNAME target's address answered")
		}
	})
	t.Run("a wildcard allows subdomains but not the apex", func(t *testing.T) {
		a := fresh(t, "*.apps.test")
		lookup(t, a, "apps.test")
		if _, err := nettest.Get(a.Netns, other); err == nil {
			t.Fatal("the apex's address answered")
		}
		lookup(t, a, "x.apps.test")
		if _, err := nettest.Get(a.Netns, web); err != nil {
			t.Fatalf("a subdomain's address: %v", err)
		}
	})
	t.Run("another sandbox's lookups open nothing for this one", func(t *testing.T) {
		a, b := fresh(t, "web.test"), fresh(t, "web.test")
		lookup(t, a, "web.test")
		if _, err := nettest.Get(b.Netns, web); err == nil {
			t.Fatal("a sandbox reached an address only another one resolved")
		}
	})
}

func TestDeniedConnectionsAreReported(t *testing.T) {
	in := nettest.New(t)
	denied := make(chan egress.Denied, 100)
	m := newManager(t, in, -1, func(_ context.Context, d egress.Denied) { denied <- d })
	closed := attach(t, m, "sb-closed", egress.Policy{AllowInternet: false})
	denyOne := attach(t, m, "sb-deny", egress.Policy{AllowInternet: true, DenyOut: []netip.Prefix{netip.PrefixFrom(in.Other, 32)}})
	// wait returns the first report for id, or fails after a generous deadline.
	wait := func(t *testing.T, id string) egress.Denied {
		t.Helper()
		deadline := time.After(20 * time.Second)
		for {
			select {
			case d := <-denied:
				if d.SandboxID == id {
					return d
				}
			case <-deadline:
				t.Fatalf("no denied connection reported for %s", id)
			}
		}
	}
	for _, tc := range []struct {
		name, id, netns, url string
		want                 egress.Denied
	}{
		{"a sandbox without internet access: destination, port and the rule", "sb-closed", closed.Netns, in.URL("http", "/"),
			egress.Denied{Dst: netip.AddrPortFrom(in.Addr, 80), Proto: "tcp", Kind: egress.DenyNoNet, Rule: "allowInternetAccess false"}},
		{"a denyOut entry names itself", "sb-deny", denyOne.Netns, "http://" + in.Other.String() + ":8080/",
			egress.Denied{Dst: netip.AddrPortFrom(in.Other, 8080), Proto: "tcp", Kind: egress.DenyOut, Rule: "denyOut " + in.Other.String() + "/32"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for range 3 {
				_, _ = nettest.Get(tc.netns, tc.url)
			}
			d := wait(t, tc.id)
			if d.Dst != tc.want.Dst || d.Proto != tc.want.Proto || d.Kind != tc.want.Kind || d.Rule != tc.want.Rule || d.Count < 1 {
				t.Fatalf("reported %+v, want %+v", d, tc.want)
			}
		})
	}
	t.Run("a flood is sampled: a few reports, not one per packet", func(t *testing.T) {
		for len(denied) > 0 {
			<-denied
		}
		for i := range 200 {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			c, err := nettest.DialIn(ctx, closed.Netns, "tcp", fmt.Sprintf("%s:%d", in.Addr, 10000+i))
			cancel()
			if err == nil {
				c.Close()
			}
		}
		begun := time.Now()
		reports, packets := 0, 0
		for window := time.After(5 * time.Second); ; {
			select {
			case d := <-denied:
				reports++
				packets += d.Count
				continue
			case <-window:
			}
			break
		}
		flushes := int(time.Since(begun)/(2*time.Second)) + 2
		if reports == 0 || reports > 5*flushes {
			t.Errorf("%d reports in %d flushes, want 1 to %d", reports, flushes, 5*flushes)
		}
		if packets >= 200 {
			t.Errorf("%d packets logged for 200 refused connects: the kernel's sampling did not hold", packets)
		}
	})
}

func TestLinkLocalIsRefusedUnlessAllowed(t *testing.T) {
	in := nettest.New(t)
	if err := in.ServeMetadata(); err != nil {
		t.Fatal(err)
	}
	denied := make(chan egress.Denied, 100)
	srv := nettest.ReserveServer(t)
	// The limit lets the metadata address through, so the sandbox's own rules decide; its
	// route leads to the fake internet either way.
	m, err := network.New(context.Background(), network.Config{Pool: srv.Pool, Table: srv.Table, LinkPrefix: srv.LinkPrefix,
		LogGroup: srv.LogGroup, DNS: []netip.AddrPort{in.DNS()}, Warm: -1, StateDir: t.TempDir(),
		EgressLimit: []netip.Prefix{nettest.Range, netip.PrefixFrom(nettest.Metadata, 32)},
		OnDenied:    func(_ context.Context, d egress.Denied) { denied <- d }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	url := "http://" + nettest.Metadata.String() + "/latest/meta-data/"
	t.Run("a sandbox with internet access does not reach the metadata address", func(t *testing.T) {
		a := attach(t, m, "sb-ll", egress.Policy{AllowInternet: true})
		if body, err := nettest.Get(a.Netns, url); err == nil {
			t.Fatalf("reached it: %q", body)
		}
		select {
		case d := <-denied:
			if d.Kind != egress.DenyLinkLocal || d.Rule != "link-local 169.254.0.0/16" {
				t.Fatalf("refused by %+v, want the link-local rule", d)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("no denied connection reported")
		}
	})
	t.Run("an allowOut entry for it opens it", func(t *testing.T) {
		a := attach(t, m, "sb-ll-allowed", egress.Policy{AllowInternet: true, AllowOut: []netip.Prefix{netip.PrefixFrom(nettest.Metadata, 32)}})
		if body, err := nettest.Get(a.Netns, url); err != nil || !strings.Contains(body, "metadata") {
			t.Fatalf("%q, %v", body, err)
		}
	})
}
