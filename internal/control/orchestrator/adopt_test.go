package orchestrator

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/sandbox/runtime"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/sdk/reason"
)

// restart lets go of every sandbox as a server stopping for an upgrade does (Detach) and
// starts a new orchestrator on the same store, runtime and network, which adopts them.
func (h *harness) restart() {
	h.t.Helper()
	h.o.Detach(context.Background())
	o, err := New(h.o.cfg)
	if err != nil {
		h.t.Fatal(err)
	}
	h.o = o
	h.t.Cleanup(func() {
		o.Shutdown(context.Background())
		o.wg.Wait()
	})
	if err := o.Recover(context.Background()); err != nil {
		h.t.Fatal(err)
	}
}

func TestARestartedServerAdoptsItsSandboxes(t *testing.T) {
	net := newFakeNetwork(t.TempDir())
	h := newHarness(t, withNetwork(net), withCheckpoints)
	ctx := context.Background()
	mk := func(req CreateRequest) string { return h.create(req).ID }
	var (
		running  = mk(CreateRequest{AllowInternet: true, PrivateTraffic: true})
		frozen   = mk(CreateRequest{})
		onDisk   = mk(CreateRequest{})
		thawed   = mk(CreateRequest{}) // recorded running, frozen in the runtime
		restored = mk(CreateRequest{}) // recorded running, on disk in the runtime
		dead     = mk(CreateRequest{})
		overdue  = mk(CreateRequest{})
	)
	token := h.o.TrafficToken(running)
	if err := h.o.PauseWith(h.ctx("req-pause"), h.team, frozen, PauseOptions{Kind: reason.PauseFreeze}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{onDisk, restored} {
		if err := h.o.PauseWith(h.ctx("req-pause"), h.team, id, PauseOptions{Kind: reason.PauseSnapshot}); err != nil {
			t.Fatal(err)
		}
	}
	h.o.Detach(ctx)
	// What happened while no server ran.
	if err := h.rt.Freeze(ctx, thawed); err != nil {
		t.Fatal(err)
	}
	rec := h.record(restored)
	rec.State, rec.PausedAt = store.StateRunning, nil
	if err := h.db.UpdateSandbox(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if err := h.rt.exitInit(dead, runtime.Exit{Code: 1}); err != nil {
		t.Fatal(err)
	}
	rec = h.record(overdue)
	rec.EndAt = time.Now().Add(-time.Minute)
	if err := h.db.UpdateSandbox(ctx, rec); err != nil {
		t.Fatal(err)
	}
	h.restart()

	for _, tt := range []struct {
		name, id string
		state    store.SandboxState
	}{
		{"a running sandbox is adopted running, its envd answering", running, store.StateRunning},
		{"a frozen sandbox stays paused", frozen, store.StatePaused},
		{"a sandbox paused to disk stays paused", onDisk, store.StatePaused},
		{"a sandbox recorded running but frozen is thawed: the record wins", thawed, store.StateRunning},
		{"a sandbox recorded running but on disk is restored: the record wins", restored, store.StateRunning},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := h.record(tt.id).State; got != tt.state {
				t.Fatalf("recorded %s, want %s", got, tt.state)
			}
			if tt.state == store.StateRunning && !h.running(tt.id) {
				t.Fatal("not running")
			}
			if st, _ := h.rt.State(ctx, tt.id); tt.state == store.StateRunning && st != runtime.StateRunning {
				t.Errorf("runtime state %s", st)
			}
			if len(h.logLines("sandbox adopted", tt.id)) != 1 {
				t.Error("no adoption logged")
			}
		})
	}
	t.Run("a sandbox whose processes died meanwhile is killed as orphaned, saying so", func(t *testing.T) {
		got := h.waitKilled(dead)
		if got.KillReason != reason.KillOrphaned {
			t.Errorf("reason %s", got.KillReason)
		}
		lines := h.logLines("sandbox killed", dead)
		if len(lines) == 0 || !strings.Contains(lines[len(lines)-1]["detail"].(string), "died while the server was down") {
			t.Errorf("kill lines %v", lines)
		}
	})
	t.Run("a sandbox whose timeout passed meanwhile is killed for timeout", func(t *testing.T) {
		if got := h.waitKilled(overdue); got.KillReason != reason.KillTimeout {
			t.Errorf("reason %s", got.KillReason)
		}
	})
	t.Run("the adopted sandbox keeps its network and traffic token", func(t *testing.T) {
		if got := h.o.TrafficToken(running); got != token || got == "" {
			t.Errorf("token %q, was %q", got, token)
		}
		if !h.record(running).AllowInternet {
			t.Error("lost its internet access")
		}
		net.mu.Lock()
		calls := net.dropCalls
		net.mu.Unlock()
		if calls != 1 {
			t.Errorf("unclaimed networks dropped %d times", calls)
		}
	})
	t.Run("adopted sandboxes pause, resume and die as any other", func(t *testing.T) {
		for _, id := range []string{frozen, onDisk} {
			if _, err := h.o.Resume(h.ctx("req-resume"), h.team, id, time.Minute); err != nil {
				t.Fatalf("resume %s: %v", id, err)
			}
			if !h.running(id) {
				t.Errorf("%s not running after its resume", id)
			}
		}
		if err := h.o.Kill(h.ctx("req-kill"), h.team, running, reason.KillRequest, ""); err != nil {
			t.Fatal(err)
		}
		if got := h.waitKilled(running); got.KillReason != reason.KillRequest {
			t.Errorf("reason %s", got.KillReason)
		}
	})
}

func TestAnAdoptionThatFailsSaysWhy(t *testing.T) {
	t.Run("a network that cannot be reclaimed leaves a running sandbox running without internet access", func(t *testing.T) {
		net := newFakeNetwork(t.TempDir())
		h := newHarness(t, withNetwork(net), withCheckpoints)
		id := h.create(CreateRequest{AllowInternet: true}).ID
		net.mu.Lock()
		net.reclaimErr = errFake
		net.mu.Unlock()
		h.restart()
		if !h.running(id) {
			t.Fatal("not running")
		}
		if sb, err := h.o.Get(h.ctx("req-get"), h.team, id); err != nil || sb.AllowInternet {
			t.Errorf("getInfo says %+v, %v; want no internet access", sb, err)
		}
	})
	t.Run("a snapshot that cannot get its network back is killed as orphaned", func(t *testing.T) {
		net := newFakeNetwork(t.TempDir())
		h := newHarness(t, withNetwork(net), withCheckpoints)
		id := h.create(CreateRequest{}).ID
		if err := h.o.PauseWith(h.ctx("req-pause"), h.team, id, PauseOptions{Kind: reason.PauseSnapshot}); err != nil {
			t.Fatal(err)
		}
		net.mu.Lock()
		net.reclaimErr = errFake
		net.mu.Unlock()
		h.restart()
		if got := h.waitKilled(id); got.KillReason != reason.KillOrphaned {
			t.Errorf("reason %s", got.KillReason)
		}
	})
	t.Run("a snapshot recorded running that cannot be restored is killed as orphaned", func(t *testing.T) {
		h := newHarness(t, withCheckpoints)
		id := h.create(CreateRequest{}).ID
		if err := h.o.PauseWith(h.ctx("req-pause"), h.team, id, PauseOptions{Kind: reason.PauseSnapshot}); err != nil {
			t.Fatal(err)
		}
		rec := h.record(id)
		rec.State, rec.PausedAt = store.StateRunning, nil
		if err := h.db.UpdateSandbox(context.Background(), rec); err != nil {
			t.Fatal(err)
		}
		h.ck().setErr(func(c *ckRuntime) { c.restoreErr = errFake })
		h.restart()
		if got := h.waitKilled(id); got.KillReason != reason.KillOrphaned {
			t.Errorf("reason %s", got.KillReason)
		}
		if lines := h.logLines("sandbox killed", id); !strings.Contains(lines[len(lines)-1]["detail"].(string), "could not restore its snapshot") {
			t.Errorf("kill lines %v", lines)
		}
	})
	t.Run("a running sandbox whose envd does not answer is killed as orphaned", func(t *testing.T) {
		h := newHarness(t, withCheckpoints)
		id := h.create(CreateRequest{}).ID
		h.rt.set(func(f *fakeRuntime) { f.envdDown = true })
		h.restart()
		if got := h.waitKilled(id); got.KillReason != reason.KillOrphaned {
			t.Errorf("reason %s", got.KillReason)
		}
	})
}
