package network_test

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/network"
	"github.com/cove-dev/cove/internal/network/nettest"
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
		a := attach(t, m, id, network.Policy{AllowInternet: true})
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
		p := network.Policy{AllowInternet: false, AllowOut: []netip.Prefix{netip.PrefixFrom(in.Addr, 32)}}
		if err := m.Update(ctx, "sb-keep", p); err != nil {
			t.Fatal(err)
		}
		if err := send(c, 64); err != nil {
			t.Fatalf("send after the update: %v", err)
		}
	})
	t.Run("an update that denies the destination cuts the open connection", func(t *testing.T) {
		c := open(t, "sb-cut")
		p := network.Policy{AllowInternet: true, DenyOut: []netip.Prefix{netip.PrefixFrom(in.Addr, 32)}}
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
