package network_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"

	"github.com/cove-dev/cove/internal/sandbox/egress"
	"github.com/cove-dev/cove/internal/sandbox/network"
	"github.com/cove-dev/cove/internal/sandbox/network/nettest"
)

// BenchmarkAttach times what a create waits for: a namespace with its veth, addresses,
// route and rules, built cold or taken from the ready pool (then rebuilt in the
// background, which this also pays for). Detach is outside the timer.
//
//	go test -run '^$' -bench Attach -benchtime 50x ./internal/sandbox/network/
func BenchmarkAttach(b *testing.B) {
	for _, tc := range []struct {
		name string
		warm int
	}{{"cold", -1}, {"warm", 4}} {
		b.Run(tc.name, func(b *testing.B) {
			in := nettest.New(b)
			srv := nettest.ReserveServer(b)
			m, err := network.New(context.Background(), network.Config{Pool: srv.Pool, Table: srv.Table,
				LinkPrefix: srv.LinkPrefix, LogGroup: srv.LogGroup, DNS: []netip.AddrPort{in.DNS()}, EgressLimit: []netip.Prefix{nettest.Range}, Warm: tc.warm, StateDir: b.TempDir()})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = m.Close(context.Background()) })
			ctx := context.Background()
			for i := 0; b.Loop(); i++ {
				id := fmt.Sprint("bench-", i)
				if _, err := m.Attach(ctx, id, egress.Policy{AllowInternet: true}); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := m.Detach(ctx, id); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}
