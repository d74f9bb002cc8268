package network_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"os"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"testing"

	"github.com/cove-dev/cove/internal/network"
	"github.com/cove-dev/cove/internal/network/nettest"
	"github.com/cove-dev/cove/internal/runtime"
)

// TestRestartReclaims: a second manager on the same state (a restarted server) gives each
// recorded sandbox its namespace, address and rules back, and removes what nobody claims.
func TestRestartReclaims(t *testing.T) {
	in := nettest.New(t)
	in.SetName("web.test", in.Addr) // where the header rule's values may go
	srv := nettest.ReserveServer(t)
	cfg := network.Config{Pool: srv.Pool, Table: srv.Table, LinkPrefix: srv.LinkPrefix, LogGroup: srv.LogGroup,
		DNS: []netip.AddrPort{in.DNS()}, EgressLimit: []netip.Prefix{nettest.Range}, Warm: -1, StateDir: t.TempDir(), UpstreamCAs: in.CAPEM}
	start := func(t *testing.T) *network.Manager {
		t.Helper()
		m, err := network.New(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Close(context.Background()) })
		return m
	}
	denyOther := network.Policy{AllowInternet: true, DenyOut: []netip.Prefix{netip.PrefixFrom(in.Other, 32)}}
	first := start(t)
	kept, err := first.Attach(context.Background(), "sb-kept", denyOther)
	if err != nil {
		t.Fatal(err)
	}
	rebuilt, err := first.Attach(context.Background(), "sb-rebuilt", network.Policy{AllowInternet: false, AllowOut: []netip.Prefix{netip.PrefixFrom(in.Addr, 32)}})
	if err != nil {
		t.Fatal(err)
	}
	orphan, err := first.Attach(context.Background(), "sb-orphan", denyOther)
	if err != nil {
		t.Fatal(err)
	}
	const secret = "Bearer planted-secret-after-restart"
	ruled, err := first.Attach(context.Background(), "sb-rules", network.Policy{AllowInternet: true,
		Transforms: []network.Transform{{Pattern: "web.test", Headers: map[string]string{"Authorization": secret}}}})
	if err != nil {
		t.Fatal(err)
	}
	relinked, err := first.Attach(context.Background(), "sb-relinked", denyOther)
	if err != nil {
		t.Fatal(err)
	}
	// What the restart must keep beside the slot: an update's policy and the inbound settings.
	if err := first.Update(context.Background(), "sb-kept", denyOther); err != nil {
		t.Fatal(err)
	}
	inbound := network.Inbound{TrafficToken: "tok-1234", MaskRequestHost: "app.test:${PORT}", HTTPSPorts: []int{8443}}
	if err := first.SetInbound("sb-kept", inbound); err != nil {
		t.Fatal(err)
	}
	ca := string(first.CAPEM())
	t.Cleanup(func() { // whatever a failure left behind
		for _, a := range []*network.Attachment{kept, rebuilt, orphan, ruled, relinked} {
			_ = runtime.RemoveNetns(a.Netns)
		}
	})
	if err := first.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(kept.Netns); err != nil {
		t.Fatalf("closing the manager removed an attached sandbox's namespace: %v", err)
	}
	// The host lost the namespace (as after a reboot): the reclaim makes it again.
	if err := runtime.RemoveNetns(rebuilt.Netns); err != nil {
		t.Fatal(err)
	}

	// Its host link is gone, its namespace is not (the sandbox's processes would be in it).
	nsBefore := inode(t, relinked.Netns)
	deleteLinkOf(t, relinked.Gateway)

	second := start(t)
	t.Cleanup(func() {
		for _, id := range []string{"sb-kept", "sb-rebuilt", "sb-orphan", "sb-rules", "sb-relinked"} {
			_ = second.Detach(context.Background(), id)
		}
	})
	for _, tc := range []struct {
		name, id string
		was      *network.Attachment
		reach    string
		refused  string
	}{
		{"a sandbox keeps its namespace, address and rules", "sb-kept", kept, in.URL("http", "/"), "http://" + in.Other.String() + "/"},
		{"a sandbox whose namespace is gone gets it made again at the same path", "sb-rebuilt", rebuilt, in.URL("http", "/"), "http://" + in.Other.String() + "/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := second.Reclaim(context.Background(), tc.id)
			if err != nil {
				t.Fatal(err)
			}
			if *a != *tc.was {
				t.Fatalf("reclaimed %+v, want %+v", a, tc.was)
			}
			if p, ok := second.Policy(tc.id); !ok || p.AllowInternet != mustPolicy(t, first, tc.id).AllowInternet {
				t.Fatalf("policy %+v, %v", p, ok)
			}
			if body, err := get(a.Netns, tc.reach); err != nil {
				t.Fatalf("egress after the restart: %q, %v", body, err)
			}
			if body, err := get(a.Netns, tc.refused); err == nil {
				t.Fatalf("the rules did not come back: a denied host answered %q", body)
			}
		})
	}
	t.Run("the inbound settings and the CA sandboxes trust are the same", func(t *testing.T) {
		got, ok := second.Inbound("sb-kept")
		if !ok || got.TrafficToken != inbound.TrafficToken || got.MaskRequestHost != inbound.MaskRequestHost || len(got.HTTPSPorts) != 1 || got.HTTPSPorts[0] != 8443 {
			t.Errorf("inbound %+v, %v, want %+v", got, ok, inbound)
		}
		if string(second.CAPEM()) != ca {
			t.Error("the restarted manager signs with another CA: adopted sandboxes would not trust its HTTPS interception")
		}
	})
	t.Run("an HTTPS request under a header rule gets the header, under the CA the sandbox trusted before", func(t *testing.T) {
		if _, err := second.Reclaim(context.Background(), "sb-rules"); err != nil {
			t.Fatal(err)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM([]byte(ca))
		c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true, TLSClientConfig: &tls.Config{RootCAs: pool},
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return nettest.DialIn(ctx, ruled.Netns, network, net.JoinHostPort(in.Addr.String(), "443"))
			}}}
		res, err := c.Get("https://web.test/after-restart")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		reqs := in.Requests()
		if got := reqs[len(reqs)-1]; got.Header.Get("Authorization") != secret || got.Path != "/after-restart" {
			t.Fatalf("the test host saw %+v", got)
		}
	})
	t.Run("a sandbox whose link is gone gets a new one into the namespace it is in", func(t *testing.T) {
		a, err := second.Reclaim(context.Background(), "sb-relinked")
		if err != nil {
			t.Fatal(err)
		}
		if got := inode(t, a.Netns); got != nsBefore {
			t.Fatalf("namespace inode %d, want the one it had, %d", got, nsBefore)
		}
		if body, err := get(a.Netns, in.URL("http", "/")); err != nil {
			t.Fatalf("egress after the restart: %q, %v", body, err)
		}
	})
	t.Run("a sandbox nobody re-claims loses its namespace and link", func(t *testing.T) {
		if err := second.DropUnclaimed(context.Background()); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(orphan.Netns); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("namespace %s: %v, want it gone", orphan.Netns, err)
		}
		if _, err := second.Reclaim(context.Background(), "sb-orphan"); !errors.Is(err, network.ErrNotAttached) {
			t.Fatalf("reclaim after the sweep: %v, want ErrNotAttached", err)
		}
	})
	t.Run("a new sandbox never gets a recorded sandbox's namespace", func(t *testing.T) {
		a, err := second.Attach(context.Background(), "sb-new", denyOther)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = second.Detach(context.Background(), "sb-new") })
		if a.Netns == kept.Netns || a.Addr == kept.Addr || a.Netns == rebuilt.Netns || a.Addr == rebuilt.Addr {
			t.Fatalf("new sandbox got %+v, a recorded sandbox's", a)
		}
	})
}

// mustPolicy is the policy a manager held for id (a closed manager still answers).
func mustPolicy(t *testing.T, m *network.Manager, id string) network.Policy {
	t.Helper()
	p, ok := m.Policy(id)
	if !ok {
		t.Fatalf("no policy for %s", id)
	}
	return p
}

// inode is the inode of the namespace pinned at path: the same inode, the same namespace.
func inode(t *testing.T, path string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// deleteLinkOf deletes the host link holding addr.
func deleteLinkOf(t *testing.T, addr netip.Addr) {
	t.Helper()
	// Another test's namespaces may go away meanwhile: read the dumps as the manager does.
	links, err := network.ConsistentDump(netlink.LinkList)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range links {
		addrs, _ := network.ConsistentDump(func() ([]netlink.Addr, error) { return netlink.AddrList(l, netlink.FAMILY_V4) })
		for _, a := range addrs {
			if a.IP.Equal(addr.AsSlice()) {
				if err := netlink.LinkDel(l); err != nil {
					t.Fatal(err)
				}
				return
			}
		}
	}
	t.Fatalf("no link holds %s", addr)
}
