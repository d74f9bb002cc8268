package network_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/cove-dev/cove/internal/control/vault"
	"github.com/cove-dev/cove/internal/sandbox/egress"
	"github.com/cove-dev/cove/internal/sandbox/network"
	"github.com/cove-dev/cove/internal/sandbox/network/nettest"
	"github.com/cove-dev/cove/internal/sandbox/runtime"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/store/sqlite"
)

// openRecords opens a real SQLite store that seals with a vault of its own, as the server's,
// and returns it with the path of its file.
func openRecords(t *testing.T) (*sqlite.DB, string) {
	t.Helper()
	dir := t.TempDir()
	v, err := vault.Open(filepath.Join(dir, "vault"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "cove.db")
	db, err := sqlite.Open(context.Background(), path, sqlite.WithSealer(v))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db, path
}

// writeLegacyRecord writes sandbox id's record as the release before this one did, to
// <RecordDir>/<id>.json (json.Marshal of an Allocation), from what the store holds, with
// change applied.
func writeLegacyRecord(t *testing.T, db store.NetworkRecords, dir, id string, change func(*network.Allocation)) {
	t.Helper()
	recs, err := db.NetworkRecords(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.SandboxID != id {
			continue
		}
		a := network.Allocation{ID: id, Index: r.Index, Link: r.Link, Addr: netip.MustParseAddr(r.Addr), Netns: r.Netns, ResolvConf: r.ResolvConf}
		var c struct {
			Policy  egress.Policy   `json:"policy"`
			Inbound network.Inbound `json:"inbound"`
		}
		if err := json.Unmarshal(r.Config, &c); err != nil {
			t.Fatal(err)
		}
		a.Policy, a.Inbound = c.Policy, c.Inbound
		if change != nil {
			change(&a)
		}
		b, err := json.Marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, id+".json"), b, 0o600); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("no record of %s", id)
}

// TestRestartReclaims: a second manager on the same state (a restarted server) gives each
// recorded sandbox its namespace, address and rules back, and removes what nobody claims.
// Records an older release wrote as files are moved into the store first; another node's
// records are never touched.
func TestRestartReclaims(t *testing.T) {
	in := nettest.New(t)
	in.SetName("web.test", in.Addr) // where the header rule's values may go
	srv := nettest.ReserveServer(t)
	db, dbPath := openRecords(t)
	keeper, err := vault.Open(t.TempDir()) // the server's vault, which the CA's key comes from
	if err != nil {
		t.Fatal(err)
	}
	cfg := network.Config{Pool: srv.Pool, Table: srv.Table, LinkPrefix: srv.LinkPrefix, LogGroup: srv.LogGroup,
		DNS: []netip.AddrPort{in.DNS()}, EgressLimit: []netip.Prefix{nettest.Range}, Warm: -1, StateDir: t.TempDir(), UpstreamCAs: in.CAPEM,
		Records: db, Keeper: keeper}
	start := func(t *testing.T) *network.Manager {
		t.Helper()
		m, err := network.New(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Close(context.Background()) })
		return m
	}
	denyOther := egress.Policy{AllowInternet: true, DenyOut: []netip.Prefix{netip.PrefixFrom(in.Other, 32)}}
	first := start(t)
	kept, err := first.Attach(context.Background(), "sb-kept", denyOther)
	if err != nil {
		t.Fatal(err)
	}
	rebuilt, err := first.Attach(context.Background(), "sb-rebuilt", egress.Policy{AllowInternet: false, AllowOut: []netip.Prefix{netip.PrefixFrom(in.Addr, 32)}})
	if err != nil {
		t.Fatal(err)
	}
	orphan, err := first.Attach(context.Background(), "sb-orphan", denyOther)
	if err != nil {
		t.Fatal(err)
	}
	const secret = "Bearer planted-secret-after-restart"
	ruled, err := first.Attach(context.Background(), "sb-rules", egress.Policy{AllowInternet: true,
		Transforms: []egress.Transform{{Pattern: "web.test", Headers: map[string]string{"Authorization": secret}}}})
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

	for _, suffix := range []string{"", "-wal"} {
		b, _ := os.ReadFile(dbPath + suffix)
		for _, clear := range []string{secret, inbound.TrafficToken} {
			if bytes.Contains(b, []byte(clear)) {
				t.Errorf("cove.db%s holds %q in the clear", suffix, clear)
			}
		}
	}
	// sb-kept's record is as an older release left it: a file, not in the store. sb-rules's
	// is in both, as a start that moved it and crashed before removing the file leaves it:
	// the file is stale (it was moved before an update), the store's record is the one.
	records := filepath.Join(cfg.StateDir, "records")
	writeLegacyRecord(t, db, records, "sb-kept", nil)
	if err := db.DeleteNetworkRecord(context.Background(), "", "sb-kept"); err != nil {
		t.Fatal(err)
	}
	writeLegacyRecord(t, db, records, "sb-rules", func(a *network.Allocation) { a.Inbound.TrafficToken = "stale-token-of-the-file" })
	// Another node's record, on the same store, naming a slot of this pool: not this
	// manager's to reclaim or drop.
	other := &store.NetworkRecord{Node: "node-b", SandboxID: "sb-of-node-b", Index: 1, Link: "other1", Addr: "198.18.0.6", Netns: "/run/other/ns-x",
		ResolvConf: "/run/other/resolv-x", Config: []byte(`{}`), UpdatedAt: time.Now().UTC()}
	if err := db.PutNetworkRecord(context.Background(), other); err != nil {
		t.Fatal(err)
	}

	second := start(t)
	t.Run("an older release's record files are moved into the store and removed", func(t *testing.T) {
		for _, id := range []string{"sb-kept", "sb-rules"} {
			if _, err := os.Stat(filepath.Join(records, id+".json")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s.json: %v, want it removed", id, err)
			}
		}
		recs, err := db.NetworkRecords(context.Background(), "")
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != 5 {
			t.Errorf("%d records, want the five sandboxes'", len(recs))
		}
	})
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
			if body, err := nettest.Get(a.Netns, tc.reach); err != nil {
				t.Fatalf("egress after the restart: %q, %v", body, err)
			}
			if body, err := nettest.Get(a.Netns, tc.refused); err == nil {
				t.Fatalf("the rules did not come back: a denied host answered %q", body)
			}
		})
	}
	t.Run("a record file whose record the store has already is skipped", func(t *testing.T) {
		if _, err := second.Reclaim(context.Background(), "sb-rules"); err != nil {
			t.Fatal(err)
		}
		if got, _ := second.Inbound("sb-rules"); got.TrafficToken != "" {
			t.Errorf("inbound %+v: the stale file replaced the store's record", got)
		}
	})
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
		if body, err := nettest.Get(a.Netns, in.URL("http", "/")); err != nil {
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
		recs, err := db.NetworkRecords(context.Background(), "")
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if r.SandboxID == "sb-orphan" {
				t.Error("the swept sandbox's record is left")
			}
		}
	})
	t.Run("another node's record is neither reclaimed nor dropped", func(t *testing.T) {
		if _, err := second.Reclaim(context.Background(), other.SandboxID); !errors.Is(err, network.ErrNotAttached) {
			t.Errorf("reclaimed another node's sandbox: %v", err)
		}
		recs, err := db.NetworkRecords(context.Background(), "node-b")
		if err != nil || len(recs) != 1 || recs[0].SandboxID != other.SandboxID {
			t.Errorf("node-b's records %+v %v", recs, err)
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
func mustPolicy(t *testing.T, m *network.Manager, id string) egress.Policy {
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
