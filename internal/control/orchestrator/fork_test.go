package orchestrator

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/control/snapshot"
	"github.com/cove-dev/cove/internal/control/vault"
	"github.com/cove-dev/cove/internal/observe/events"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/sdk/reason"
)

// withSnapshots gives the harness a snapshot store in dir, its records in the harness's
// store, and a checkpointing runtime.
func withSnapshots(t testing.TB, dir string) option {
	return func(c *Config) {
		snaps, err := snapshot.Open(context.Background(), dir, c.Store.(store.Snapshots), "")
		if err != nil {
			t.Fatal(err)
		}
		withCheckpoints(c)
		c.Snapshots = snaps
	}
}

// running says whether sandbox id is live, recorded running, and its envd answers.
func (h *harness) running(id string) bool {
	h.t.Helper()
	sb, err := h.o.Get(h.ctx("req-get"), h.team, id)
	if err != nil || sb.State != store.StateRunning {
		return false
	}
	return waitHealthy(context.Background(), h.o.envdClient(id), 10*time.Second) == nil
}

func TestForkStartsIndependentCopiesOfARunningSandbox(t *testing.T) {
	snapDir := filepath.Join(t.TempDir(), "snapshots")
	h := newHarness(t, withSnapshots(t, snapDir))
	parent := h.create(CreateRequest{Metadata: map[string]string{"owner": "ci"}, Timeout: time.Hour})
	res, err := h.o.Fork(h.ctx("req-fork"), h.team, parent.ID, 3, time.Minute)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("it starts count copies, each its own sandbox from the parent's checkpoint", func(t *testing.T) {
		if len(res) != 3 {
			t.Fatalf("%d results, want 3", len(res))
		}
		seen := map[string]bool{parent.ID: true}
		for i, r := range res {
			if r.Err != nil {
				t.Fatalf("copy %d: %v", i, r.Err)
			}
			id := r.Sandbox.ID
			if seen[id] {
				t.Fatalf("copy %d has id %s twice", i, id)
			}
			seen[id] = true
			h.ck().mu.Lock()
			from := h.ck().restoredFrom[id]
			h.ck().mu.Unlock()
			if from != parent.ID {
				t.Errorf("copy %s restored from %q, want the parent %s", id, from, parent.ID)
			}
			if rec := h.record(id); rec.State != store.StateRunning || rec.Metadata["owner"] != "ci" || time.Until(rec.EndAt) > 2*time.Minute {
				t.Errorf("copy record %+v: want running, the parent's metadata, the fork's timeout", rec)
			}
			if _, data := h.event(id, events.SandboxCreated); data["forked_from"] != parent.ID {
				t.Errorf("created event of %s: %v", id, data)
			}
		}
	})
	t.Run("the parent keeps running with its id and timeout, and says it was checkpointed for a fork", func(t *testing.T) {
		if !h.running(parent.ID) {
			t.Fatal("the parent is not running")
		}
		if rec := h.record(parent.ID); rec.EndAt.Sub(parent.EndAt).Abs() > time.Millisecond {
			t.Errorf("parent end %v, was %v", rec.EndAt, parent.EndAt)
		}
		if _, data := h.event(parent.ID, events.SandboxCheckpointed); data["purpose"] != "fork" {
			t.Errorf("checkpointed event %v", data)
		}
	})
	t.Run("killing one copy leaves the other copies and the parent running", func(t *testing.T) {
		if err := h.o.Kill(h.ctx("req-kill"), h.team, res[0].Sandbox.ID, reason.KillRequest, ""); err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{parent.ID, res[1].Sandbox.ID, res[2].Sandbox.ID} {
			if !h.running(id) {
				t.Errorf("%s is not running after another copy's kill", id)
			}
		}
	})
	t.Run("the fork's export is removed once the copies started", func(t *testing.T) {
		entries, _ := os.ReadDir(snapDir)
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), ".fork-") {
				t.Errorf("left over: %s", e.Name())
			}
		}
	})
}

func TestAForkThatCannotBeMadeLeavesNothingBehind(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(h *harness, id string) // before the fork
		count   int
		want    error
		perCopy bool // the fork returns, each copy with its error
	}{
		{name: "a count of 0 is invalid", count: 0, want: ErrInvalid},
		{name: "a count over the maximum is invalid", count: MaxForks + 1, want: ErrInvalid},
		{name: "a frozen sandbox is a conflict", count: 1, want: ErrConflict, setup: func(h *harness, id string) {
			if err := h.o.PauseWith(h.ctx("req-pause"), h.team, id, PauseOptions{Kind: reason.PauseFreeze}); err != nil {
				h.t.Fatal(err)
			}
		}},
		{name: "a failing checkpoint fails the fork and the sandbox runs on", count: 2, want: errFake, setup: func(h *harness, id string) {
			h.ck().setErr(func(c *ckRuntime) { c.checkpointErr = errFake })
		}},
		{name: "a failing export fails the fork and the sandbox is restored", count: 2, want: errFake, setup: func(h *harness, id string) {
			h.ck().setErr(func(c *ckRuntime) { c.exportErr = errFake })
		}},
		{name: "copies the runtime cannot start fail each on its own and are cleaned up", count: 2, want: errFake, perCopy: true, setup: func(h *harness, id string) {
			h.rt.set(func(f *fakeRuntime) { f.createErr = errFake })
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			snapDir := filepath.Join(t.TempDir(), "snapshots")
			h := newHarness(t, withSnapshots(t, snapDir))
			parent := h.create(CreateRequest{})
			if tt.setup != nil {
				tt.setup(h, parent.ID)
			}
			res, err := h.o.Fork(h.ctx("req-fork"), h.team, parent.ID, tt.count, time.Minute)
			if tt.perCopy {
				if err != nil || len(res) != tt.count {
					t.Fatalf("fork: %v, %d results", err, len(res))
				}
				for _, r := range res {
					if !errors.Is(r.Err, tt.want) || r.Sandbox != nil {
						t.Errorf("copy: %v, %v; want %v", r.Sandbox, r.Err, tt.want)
					}
				}
			} else if !errors.Is(err, tt.want) || res != nil {
				t.Fatalf("fork: %v, %v; want %v", res, err, tt.want)
			}
			ids, _ := h.rt.List(context.Background())
			if len(ids) != 1 || ids[0] != parent.ID {
				t.Errorf("runtime holds %v, want only the parent", ids)
			}
			page, err := h.o.List(context.Background(), store.SandboxFilter{TeamID: h.team})
			if err != nil || len(page.Sandboxes) != 1 {
				t.Errorf("records: %v, %v; want only the parent's", page, err)
			}
			if rec := h.record(parent.ID); rec.State == store.StateKilled {
				t.Errorf("the parent was killed for %s", rec.KillReason)
			}
			entries, _ := os.ReadDir(snapDir)
			if len(entries) != 0 {
				t.Errorf("the snapshot dir holds %v", entries)
			}
		})
	}
	t.Run("a server without snapshots cannot fork", func(t *testing.T) {
		h := newHarness(t)
		sb := h.create(CreateRequest{})
		if _, err := h.o.Fork(h.ctx("req-fork"), h.team, sb.ID, 1, 0); !errors.Is(err, ErrInvalid) {
			t.Errorf("fork: %v", err)
		}
		if _, err := h.o.CreateSnapshot(h.ctx("req-snap"), h.team, sb.ID, "x"); !errors.Is(err, ErrInvalid) {
			t.Errorf("snapshot: %v", err)
		}
		if err := h.o.DeleteSnapshot(h.ctx("req-del"), h.team, "snap_x"); !errors.Is(err, ErrNotFound) {
			t.Errorf("delete: %v", err)
		}
		if l, err := h.o.ListSnapshots(h.ctx("req-ls"), h.team, "", ""); l != nil || err != nil {
			t.Errorf("list: %v, %v", l, err)
		}
	})
	t.Run("another team's sandbox is not found", func(t *testing.T) {
		h := newHarness(t, withSnapshots(t, filepath.Join(t.TempDir(), "snapshots")))
		sb := h.create(CreateRequest{})
		if _, err := h.o.Fork(h.ctx("req-fork"), "other-team", sb.ID, 1, 0); !errors.Is(err, ErrNotFound) {
			t.Errorf("fork: %v", err)
		}
	})
}

func TestSnapshotsStartNewSandboxesAndCountOnDisk(t *testing.T) {
	v, err := vault.Open(filepath.Join(t.TempDir(), "vault"))
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, withSnapshots(t, filepath.Join(t.TempDir(), "snapshots")), func(c *Config) { c.Vault = v })
	const secret = "snapshot-secret-777777"
	src := h.create(CreateRequest{Metadata: map[string]string{"stage": "warm"}, EnvVars: map[string]string{"API_TOKEN": secret}})
	sn, err := h.o.CreateSnapshot(h.ctx("req-snap"), h.team, src.ID, "warm")
	if err != nil {
		t.Fatal(err)
	}

	t.Run("the snapshot keeps its sandbox's checkpoint, metadata and secrets, and the sandbox runs on", func(t *testing.T) {
		if sn.SandboxID != src.ID || sn.Bytes != ckBytes || sn.Metadata["stage"] != "warm" || sn.TeamID != h.team {
			t.Errorf("snapshot %+v", sn)
		}
		if kept, _ := v.Get(sn.ID); !strings.Contains(strings.Join(kept, ","), secret) {
			t.Errorf("kept secrets of the snapshot: %v", kept)
		}
		if !h.running(src.ID) {
			t.Error("the sandbox is not running")
		}
		if l, err := h.o.ListSnapshots(h.ctx("req-ls"), h.team, "", "warm"); err != nil || len(l) != 1 || l[0].ID != sn.ID {
			t.Errorf("list by name: %v, %v", l, err)
		}
	})
	t.Run("a create with the snapshot's id as template starts from its checkpoint", func(t *testing.T) {
		sb := h.create(CreateRequest{TemplateID: sn.ID, EnvVars: map[string]string{"IGNORED": "x"}})
		h.ck().mu.Lock()
		from := h.ck().restoredFrom[sb.ID]
		h.ck().mu.Unlock()
		if from != src.ID || sb.Metadata["stage"] != "warm" || sb.TemplateID != "base" {
			t.Errorf("from %q, sandbox %+v", from, sb)
		}
		if _, data := h.event(sb.ID, events.SandboxCreated); data["snapshot_id"] != sn.ID {
			t.Errorf("created event %v", data)
		}
		if kept, _ := v.Get(sb.ID); !strings.Contains(strings.Join(kept, ","), secret) {
			t.Errorf("the new sandbox is not masked of the snapshot's secrets: %v", kept)
		}
	})
	t.Run("another team cannot start from or delete the snapshot", func(t *testing.T) {
		if _, err := h.o.Create(h.ctx("req-create"), CreateRequest{TeamID: "other-team", TemplateID: sn.ID}); !errors.Is(err, ErrTemplateNotFound) {
			t.Errorf("create: %v", err)
		}
		if err := h.o.DeleteSnapshot(h.ctx("req-del"), "other-team", sn.ID); !errors.Is(err, ErrNotFound) {
			t.Errorf("delete: %v", err)
		}
	})
	t.Run("disk usage counts the team's snapshots and sandboxes paused to disk", func(t *testing.T) {
		if err := h.o.Pause(h.ctx("req-pause"), h.team, src.ID); err != nil {
			t.Fatal(err)
		}
		usage, err := h.o.DiskUsage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(usage) != 1 || usage[0].TeamID != h.team || usage[0].Snapshots != 1 || usage[0].SnapshotBytes != ckBytes ||
			usage[0].PausedSandboxes != 1 || usage[0].PausedBytes != ckBytes {
			t.Errorf("usage %+v", usage)
		}
	})
	t.Run("a sandbox paused to disk is snapshotted as it is and resumes running", func(t *testing.T) {
		sn2, err := h.o.CreateSnapshot(h.ctx("req-snap"), h.team, src.ID, "paused")
		if err != nil || sn2.SandboxID != src.ID {
			t.Fatalf("snapshot of a paused sandbox: %v, %v", sn2, err)
		}
		if _, err := h.o.Resume(h.ctx("req-resume"), h.team, src.ID, time.Minute); err != nil {
			t.Fatal(err)
		}
		if !h.running(src.ID) {
			t.Error("not running after the resume")
		}
	})
	t.Run("a deleted snapshot starts nothing and its kept secrets go", func(t *testing.T) {
		if err := h.o.DeleteSnapshot(h.ctx("req-del"), h.team, sn.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := h.o.Create(h.ctx("req-create"), CreateRequest{TeamID: h.team, TemplateID: sn.ID}); !errors.Is(err, ErrTemplateNotFound) {
			t.Errorf("create: %v", err)
		}
		if kept, err := v.Get(sn.ID); err == nil && len(kept) > 0 {
			t.Errorf("still kept: %v", kept)
		}
	})
}

func TestForkedCopiesCountAgainstTheTeamsQuota(t *testing.T) {
	h := newHarness(t, withSnapshots(t, filepath.Join(t.TempDir(), "snapshots")),
		func(c *Config) { c.Quotas = Quotas{Default: Quota{Sandboxes: 2}} })
	parent := h.create(CreateRequest{})
	res, err := h.o.Fork(h.ctx("req-fork"), h.team, parent.ID, 2, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var quota *QuotaError
	if res[0].Err != nil || !errors.As(res[1].Err, &quota) || quota.Limit != "concurrent sandboxes" {
		t.Fatalf("copies %v, %v: want the first made and the second over the quota of 2", res[0].Err, res[1].Err)
	}
	if l, _ := h.rt.List(context.Background()); len(l) != 2 {
		t.Errorf("runtime sandboxes %v, want the parent and one copy", l)
	}
}
