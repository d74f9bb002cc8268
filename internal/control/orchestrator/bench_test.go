package orchestrator

import (
	"path/filepath"
	"testing"

	"github.com/cove-dev/cove/sdk/reason"
)

// The launch pipeline's own cost, over the fake runtime (an in-process envd, a real SQLite
// file, the real events bus): what Cove adds around runc, create by create.

// drainCreated empties the fake runtime's created channel while b runs: its buffer holds
// fewer ids than a benchmark makes.
func drainCreated(b *testing.B, h *harness) {
	done := make(chan struct{})
	b.Cleanup(func() { close(done) })
	go func() {
		for {
			select {
			case <-h.rt.created:
			case <-done:
				return
			}
		}
	}()
}

func BenchmarkCreate(b *testing.B) {
	h := newHarness(b, withNetwork(newFakeNetwork(b.TempDir())))
	drainCreated(b, h)
	ctx := h.ctx("req-bench")
	b.ResetTimer()
	for range b.N {
		sb, err := h.o.Create(ctx, CreateRequest{TeamID: h.team})
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := h.o.Kill(ctx, h.team, sb.ID, reason.KillRequest, ""); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

func BenchmarkForkCopy(b *testing.B) {
	h := newHarness(b, withSnapshots(b, filepath.Join(b.TempDir(), "snapshots")), withNetwork(newFakeNetwork(b.TempDir())))
	drainCreated(b, h)
	ctx := h.ctx("req-bench")
	parent := h.create(CreateRequest{})
	b.ResetTimer()
	for range b.N {
		res, err := h.o.Fork(ctx, h.team, parent.ID, 1, 0)
		if err == nil {
			err = res[0].Err
		}
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := h.o.Kill(ctx, h.team, res[0].Sandbox.ID, reason.KillRequest, ""); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}
