package network_test

import (
	"context"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/sandbox/egress"
	"github.com/cove-dev/cove/internal/sandbox/network"
	"github.com/cove-dev/cove/internal/sandbox/network/nettest"
)

// TestOpenConnectionsFollowUpdates: the forward chain lets the packets of a connection the
// sandbox's policy accepted through without walking the rules again (the fast path), and an
// update still judges an open connection's next packet by the new rules.
func TestOpenConnectionsFollowUpdates(t *testing.T) {
	in := nettest.New(t)
	m := newManager(t, in, 0)
	ctx := context.Background()
	sink := net.JoinHostPort(in.Addr.String(), "9000")
	chunk := make([]byte, 64<<10)
	// send writes n chunks; the error is the first write's that failed.
	send := func(c net.Conn, n int) error {
		for range n {
			if err := c.SetWriteDeadline(time.Now().Add(10 * time.Second)); err != nil {
				return err
			}
			if _, err := c.Write(chunk); err != nil {
				return err
			}
		}
		return nil
	}
	open := func(t *testing.T, id string) net.Conn {
		a := attach(t, m, id, egress.Policy{AllowInternet: true})
		c, err := nettest.DialIn(ctx, a.Netns, "tcp", sink)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if err := send(c, 64); err != nil { // 4 MiB through the fast path
			t.Fatalf("send before the update: %v", err)
		}
		return c
	}

	t.Run("an update that still allows the destination keeps the connection", func(t *testing.T) {
		c := open(t, "sb-keep")
		p := egress.Policy{AllowInternet: false, AllowOut: []netip.Prefix{netip.PrefixFrom(in.Addr, 32)}}
		if err := m.Update(ctx, "sb-keep", p); err != nil {
			t.Fatal(err)
		}
		if err := send(c, 64); err != nil {
			t.Fatalf("send after the update: %v", err)
		}
	})
	t.Run("an update that denies the destination cuts the open connection", func(t *testing.T) {
		c := open(t, "sb-cut")
		p := egress.Policy{AllowInternet: true, DenyOut: []netip.Prefix{netip.PrefixFrom(in.Addr, 32)}}
		if err := m.Update(ctx, "sb-cut", p); err != nil {
			t.Fatal(err)
		}
		// The first packet after the update is refused with a reset: a write soon fails.
		// 4,096 chunks are 256 MiB, far more than the socket buffers hold.
		if err := send(c, 4096); err == nil {
			t.Fatal("256 MiB more went through on a connection the new rules deny")
		}
	})
}

// TestAnUpdateThatChangesNoRuleRunsNoNft: a warm pool's sandbox claimed under the rules it
// was started with (only the team changes) costs no nft run; a change of rules does.
func TestAnUpdateThatChangesNoRuleRunsNoNft(t *testing.T) {
	in := nettest.New(t)
	nft, err := exec.LookPath("nft")
	if err != nil {
		t.Skip("no nft binary")
	}
	dir := t.TempDir()
	calls := filepath.Join(dir, "calls")
	wrapper := filepath.Join(dir, "nft")
	if err := os.WriteFile(wrapper, []byte("#!/bin/sh\ns=$(cat)\nprintf '%s\\n--\\n' \"$s\" >> "+calls+"\nprintf '%s\\n' \"$s\" | exec "+nft+" \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	srv := nettest.ReserveServer(t)
	m, err := network.New(context.Background(), network.Config{
		Pool: srv.Pool, Table: srv.Table, LinkPrefix: srv.LinkPrefix, LogGroup: srv.LogGroup,
		DNS: []netip.AddrPort{in.DNS()}, EgressLimit: []netip.Prefix{nettest.Range}, StateDir: t.TempDir(), NFT: wrapper,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	a := attach(t, m, "sb-pooled", egress.Policy{AllowInternet: true})
	// The runs that set this sandbox's rules (warm namespaces are readied beside).
	runs := func() int {
		b, _ := os.ReadFile(calls)
		n := 0
		for _, script := range strings.Split(string(b), "\n--\n") {
			if strings.Contains(script, "flush chain") && strings.Contains(script, " . "+a.Addr.String()+" }") {
				n++
			}
		}
		return n
	}
	before := runs()
	if err := m.Update(context.Background(), "sb-pooled", egress.Policy{AllowInternet: true, Team: "t1"}); err != nil {
		t.Fatal(err)
	}
	if p, _ := m.Policy("sb-pooled"); p.Team != "t1" || runs() != before {
		t.Errorf("policy %+v after %d nft runs; want the team's, and none", p, runs()-before)
	}
	if err := m.Update(context.Background(), "sb-pooled", egress.Policy{Team: "t1"}); err != nil {
		t.Fatal(err)
	}
	if runs() != before+1 {
		t.Errorf("%d nft runs for a change of rules, want 1", runs()-before)
	}
	if p, _ := m.Policy("sb-pooled"); p.AllowInternet {
		t.Error("the internet is still allowed")
	}
}
