package nettest

import (
	"context"
	"net/netip"
	"testing"

	"github.com/cove-dev/cove/internal/sandbox/egress"
	"github.com/cove-dev/cove/internal/sandbox/network"
)

// Manager starts a network manager on a reserved test pool whose sandboxes can reach nothing
// but Range, resolving through in's DNS server, and closes it when t ends. onDenied, when
// given, hears the refused connections.
func Manager(t *testing.T, in *Internet, warm int, onDenied ...func(context.Context, egress.Denied)) *network.Manager {
	t.Helper()
	srv := ReserveServer(t)
	cfg := network.Config{
		Pool: srv.Pool, Table: srv.Table, LinkPrefix: srv.LinkPrefix, LogGroup: srv.LogGroup,
		DNS:         []netip.AddrPort{in.DNS()},
		EgressLimit: []netip.Prefix{Range},
		Warm:        warm,
		StateDir:    t.TempDir(),
	}
	if len(onDenied) > 0 {
		cfg.OnDenied = onDenied[0]
	}
	m, err := network.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(context.Background()); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return m
}

// Attach attaches sandbox id to m under p, detaching it when t ends.
func Attach(t *testing.T, m *network.Manager, id string, p egress.Policy) *network.Attachment {
	t.Helper()
	a, err := m.Attach(context.Background(), id, p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Detach(context.Background(), id) })
	return a
}
