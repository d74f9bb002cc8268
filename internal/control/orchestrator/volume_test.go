package orchestrator

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cove-dev/cove/internal/control/snapshot"
	"github.com/cove-dev/cove/internal/control/volumes"
	"github.com/cove-dev/cove/internal/errdefs"
	"github.com/cove-dev/cove/internal/observe/events"
	"github.com/cove-dev/cove/internal/sandbox/runtime"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/sdk/reason"
)

// volumesOf is the volume API over the harness's volumes, wired as the server wires it: the
// orchestrator says which sandboxes hold their mounts.
func volumesOf(h *harness) *volumes.Service {
	return volumes.New(volumes.Config{Store: h.o.cfg.Volumes, Sandboxes: h.o,
		Quota: func(team string) volumes.Quota {
			q := h.o.cfg.Quotas.For(team)
			return volumes.Quota{Volumes: q.Volumes, MB: q.VolumeMB}
		}})
}

// withVolumes gives the harness a volume store of plain directories (sized volumes are
// loop-mounted images: root and mkfs, tested in internal/control/snapshot), its records in the
// harness's store.
func withVolumes(t *testing.T) option {
	dir := filepath.Join(t.TempDir(), "volumes")
	return func(c *Config) {
		vols, err := snapshot.OpenVolumes(context.Background(), dir, c.Store.(store.Volumes), "")
		if err != nil {
			t.Fatal(err)
		}
		c.Volumes = vols
	}
}

func TestVolumeMountsHoldTheirVolumes(t *testing.T) {
	h := newHarness(t, withVolumes(t), withSnapshots(t, filepath.Join(t.TempDir(), "snapshots")))
	ctx := h.ctx("req-vol")
	vol, err := volumesOf(h).CreateVolume(ctx, h.team, "data", 0)
	if err != nil {
		t.Fatal(err)
	}
	writer := h.create(CreateRequest{VolumeMounts: []VolumeMount{{Name: "data", Path: "/data/"}}})

	t.Run("the writer's sandbox gets the volume's directory bound read-write at the clean path", func(t *testing.T) {
		h.rt.mu.Lock()
		binds := h.rt.specs[writer.ID].Binds
		h.rt.mu.Unlock()
		want := runtime.Bind{Source: h.o.cfg.Volumes.DataDir(vol.ID), Target: "/data"}
		if !slices.Contains(binds, want) {
			t.Errorf("binds %+v lack %+v", binds, want)
		}
		mounts, err := volumesOf(h).VolumeMountsOf(ctx, h.team, writer.ID)
		if err != nil || !slices.Equal(mounts, []volumes.Mount{{Name: "data", Path: "/data"}}) {
			t.Errorf("mounts %+v, %v", mounts, err)
		}
	})
	t.Run("a second read-write mount is a conflict and starts nothing", func(t *testing.T) {
		before, _ := h.rt.List(context.Background())
		_, err := h.o.Create(h.ctx("req-create"), CreateRequest{TeamID: h.team, VolumeMounts: []VolumeMount{{Name: vol.ID, Path: "/data"}}})
		if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), writer.ID) {
			t.Fatalf("create: %v; want a conflict naming %s", err, writer.ID)
		}
		if after, _ := h.rt.List(context.Background()); len(after) != len(before) {
			t.Errorf("runtime sandboxes %v, were %v", after, before)
		}
	})
	var readers []string
	t.Run("many sandboxes mount it read-only beside the writer", func(t *testing.T) {
		for range 2 {
			sb := h.create(CreateRequest{VolumeMounts: []VolumeMount{{Name: "data", Path: "/ro", ReadOnly: true}}})
			readers = append(readers, sb.ID)
			if m, _ := volumesOf(h).VolumeMountsOf(ctx, h.team, sb.ID); len(m) != 1 || !m[0].ReadOnly {
				t.Errorf("mounts of a reader %+v", m)
			}
		}
	})
	t.Run("a sandbox sharing its volume with another of the node does not move: a volume is on one node at a time", func(t *testing.T) {
		err := h.o.volumesMovable(h.team, writer.ID)
		if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), readers[0]) && !strings.Contains(err.Error(), readers[1]) {
			t.Errorf("the writer's move: %v; want a conflict naming a reader", err)
		}
		alone := h.create(CreateRequest{})
		if err := h.o.volumesMovable(h.team, alone.ID); err != nil {
			t.Errorf("a sandbox without volumes: %v", err)
		}
	})
	t.Run("a sandbox writing a volume is not forked, and nothing is checkpointed: its copies could not write it", func(t *testing.T) {
		_, err := h.o.Fork(ctx, h.team, writer.ID, 1, 0)
		if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "volume data read-write at /data") {
			t.Errorf("fork: %v; want a conflict naming the volume and its path", err)
		}
		for _, ev := range h.events(writer.ID) {
			if ev.Type == string(events.SandboxCheckpointed) {
				t.Errorf("the refused fork checkpointed the writer: %s", ev.Data)
			}
		}
	})
	t.Run("a reader's forks mount the volume read-only at the same path", func(t *testing.T) {
		res, err := h.o.Fork(ctx, h.team, readers[0], 2, 0)
		if err != nil {
			t.Fatal(err)
		}
		want := runtime.Bind{Source: h.o.cfg.Volumes.DataDir(vol.ID), Target: "/ro", ReadOnly: true}
		for _, r := range res {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			h.rt.mu.Lock()
			binds := h.rt.specs[r.Sandbox.ID].Binds
			h.rt.mu.Unlock()
			if !slices.Contains(binds, want) {
				t.Errorf("copy binds %+v lack %+v", binds, want)
			}
			if m, _ := volumesOf(h).VolumeMountsOf(ctx, h.team, r.Sandbox.ID); !slices.Equal(m, []volumes.Mount{{Name: "data", Path: "/ro", ReadOnly: true}}) {
				t.Errorf("copy mounts %+v", m)
			}
			readers = append(readers, r.Sandbox.ID)
		}
	})
	var snap *snapshot.Snapshot
	t.Run("a writer's snapshot keeps its mounts; a sandbox from it writes the volume once the writer is gone", func(t *testing.T) {
		var err error
		if snap, err = h.o.CreateSnapshot(ctx, h.team, writer.ID, "with-data"); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(snap.Volumes, []snapshot.VolumeMount{{VolumeID: vol.ID, Path: "/data"}}) {
			t.Errorf("snapshot volumes %+v", snap.Volumes)
		}
		_, err = h.o.Create(h.ctx("req-from-snap"), CreateRequest{TeamID: h.team, TemplateID: snap.ID})
		if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), writer.ID) {
			t.Fatalf("create from the snapshot while the writer lives: %v; want a conflict naming %s", err, writer.ID)
		}
		_, err = h.o.Create(h.ctx("req-from-snap"), CreateRequest{TeamID: h.team, TemplateID: snap.ID, VolumeMounts: []VolumeMount{{Name: "data", Path: "/x"}}})
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "volumeMounts") {
			t.Errorf("create from the snapshot with mounts of its own: %v; want invalid naming volumeMounts", err)
		}
		if err := h.o.Kill(ctx, h.team, writer.ID, reason.KillRequest, ""); err != nil {
			t.Fatal(err)
		}
		sb := h.create(CreateRequest{TemplateID: snap.ID})
		if m, _ := volumesOf(h).VolumeMountsOf(ctx, h.team, sb.ID); !slices.Equal(m, []volumes.Mount{{Name: "data", Path: "/data"}}) {
			t.Errorf("mounts of the sandbox from the snapshot %+v", m)
		}
		readers = append(readers, sb.ID) // killed with the rest below
	})
	t.Run("a mounted volume cannot be deleted", func(t *testing.T) {
		if err := volumesOf(h).DeleteVolume(ctx, h.team, "data"); !errors.Is(err, volumes.ErrConflict) {
			t.Errorf("delete: %v", err)
		}
	})
	t.Run("once its sandboxes are killed the volume is deleted and gone", func(t *testing.T) {
		for _, id := range readers {
			if err := h.o.Kill(ctx, h.team, id, reason.KillRequest, ""); err != nil {
				t.Fatal(err)
			}
		}
		if err := volumesOf(h).DeleteVolume(ctx, h.team, "data"); err != nil {
			t.Fatal(err)
		}
		if _, err := h.o.Create(h.ctx("req-from-snap"), CreateRequest{TeamID: h.team, TemplateID: snap.ID}); !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "was deleted") {
			t.Errorf("create from a snapshot whose volume is deleted: %v", err)
		}
		if _, err := volumesOf(h).Volume(ctx, h.team, vol.ID); !errors.Is(err, volumes.ErrNotFound) {
			t.Errorf("volume after its delete: %v", err)
		}
	})
}

func TestVolumeRequestsAreChecked(t *testing.T) {
	h := newHarness(t, withVolumes(t))
	ctx := h.ctx("req-vol")
	vol, err := volumesOf(h).CreateVolume(ctx, h.team, "cache", 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("a volume is found by id and name by its team, and by id alone for its content", func(t *testing.T) {
		for _, key := range []string{vol.ID, "cache"} {
			if got, err := volumesOf(h).Volume(ctx, h.team, key); err != nil || got.ID != vol.ID {
				t.Errorf("volume %s: %v, %v", key, got, err)
			}
		}
		if got, err := volumesOf(h).VolumeByID(ctx, vol.ID); err != nil || got.Token != vol.Token {
			t.Errorf("by id: %v, %v", got, err)
		}
		if l, err := volumesOf(h).ListVolumes(ctx, h.team); err != nil || len(l) != 1 {
			t.Errorf("list: %v, %v", l, err)
		}
		if n, err := volumesOf(h).VolumeUsage(ctx, vol); n != 0 || err != nil {
			t.Errorf("usage of a volume without a size: %d, %v", n, err)
		}
		f, err := volumesOf(h).VolumeFiles(ctx, vol)
		if err != nil {
			t.Fatal(err)
		}
		_ = f.Close()
	})
	for _, tt := range []struct {
		name string
		call func() error
		want error
		says string
	}{
		{"another team's volume is not found", func() error { _, err := volumesOf(h).Volume(ctx, "other-team", "cache"); return err }, volumes.ErrNotFound, "not found"},
		{"an unknown id is not found", func() error { _, err := volumesOf(h).VolumeByID(ctx, "vol-0000000000000000"); return err }, volumes.ErrNotFound, "not found"},
		{"a second volume of the name is a conflict", func() error { _, err := volumesOf(h).CreateVolume(ctx, h.team, "cache", 0); return err }, volumes.ErrConflict, "exists"},
		{"a bad name is invalid, naming the field", func() error { _, err := volumesOf(h).CreateVolume(ctx, h.team, "-bad name", 0); return err }, volumes.ErrInvalid, "name:"},
		{"a bad size is invalid, naming the field", func() error { _, err := volumesOf(h).CreateVolume(ctx, h.team, "tiny", -1); return err }, volumes.ErrInvalid, "sizeMB:"},
		{"deleting another team's volume is not found", func() error { return volumesOf(h).DeleteVolume(ctx, "other-team", vol.ID) }, volumes.ErrNotFound, "not found"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.call(); !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.says) {
				t.Errorf("err %v; want %v saying %q", err, tt.want, tt.says)
			}
		})
	}
	for _, tt := range []struct {
		name   string
		mounts []VolumeMount
	}{
		{"a relative mount path is invalid", []VolumeMount{{Name: "cache", Path: "data"}}},
		{"a mount on / is invalid", []VolumeMount{{Name: "cache", Path: "/"}}},
		{"a mount under /.cove is invalid", []VolumeMount{{Name: "cache", Path: "/.cove/x"}}},
		{"a mount under /proc is invalid", []VolumeMount{{Name: "cache", Path: "/proc/self"}}},
		{"a mount on /sys is invalid", []VolumeMount{{Name: "cache", Path: "/sys"}}},
		{"a mount on /dev is invalid", []VolumeMount{{Name: "cache", Path: "/dev"}}},
		{"a mount on /dev/pts is invalid", []VolumeMount{{Name: "cache", Path: "/dev/pts/"}}},
		{"a mount under /run is invalid", []VolumeMount{{Name: "cache", Path: "/run/x"}}},
		{"one path mounted twice is invalid", []VolumeMount{{Name: "cache", Path: "/a", ReadOnly: true}, {Name: "cache", Path: "/a/", ReadOnly: true}}},
		{"an unknown volume is invalid", []VolumeMount{{Name: "nope", Path: "/a"}}},
	} {
		t.Run(tt.name+" and starts nothing", func(t *testing.T) {
			_, err := h.o.Create(h.ctx("req-create"), CreateRequest{TeamID: h.team, VolumeMounts: tt.mounts})
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "volumeMounts") {
				t.Errorf("create: %v; want invalid volumeMounts", err)
			}
			if ids, _ := h.rt.List(context.Background()); len(ids) != 0 {
				t.Errorf("runtime holds %v", ids)
			}
		})
	}
	t.Run("a server without volumes refuses them and lists none", func(t *testing.T) {
		h := newHarness(t)
		if _, err := volumesOf(h).CreateVolume(ctx, h.team, "x", 0); !errors.Is(err, volumes.ErrInvalid) {
			t.Errorf("create volume: %v", err)
		}
		if _, err := h.o.Create(h.ctx("req-create"), CreateRequest{TeamID: h.team, VolumeMounts: []VolumeMount{{Name: "x", Path: "/x"}}}); !errors.Is(err, ErrInvalid) {
			t.Errorf("create with a mount: %v", err)
		}
		if _, err := volumesOf(h).Volume(ctx, h.team, "x"); !errors.Is(err, volumes.ErrNotFound) {
			t.Errorf("volume: %v", err)
		}
		if _, err := volumesOf(h).VolumeByID(ctx, "x"); !errors.Is(err, volumes.ErrNotFound) {
			t.Errorf("volume by id: %v", err)
		}
		if l, err := volumesOf(h).ListVolumes(ctx, h.team); l != nil || err != nil {
			t.Errorf("list: %v, %v", l, err)
		}
		if m, err := volumesOf(h).VolumeMountsOf(ctx, h.team, "x"); m != nil || err != nil {
			t.Errorf("mounts: %v, %v", m, err)
		}
	})
}

func TestVolumeCreatesAreBoundedPerTeamAndByTheHostsDisk(t *testing.T) {
	h := newHarness(t, withVolumes(t), func(c *Config) {
		c.Quotas = Quotas{Default: Quota{Volumes: 2}}
	})
	ctx := h.ctx("req-vol")
	for _, name := range []string{"a", "b"} {
		if _, err := volumesOf(h).CreateVolume(ctx, h.team, name, 0); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("a volume past the team's count is refused as resource exhausted (429)", func(t *testing.T) {
		_, err := volumesOf(h).CreateVolume(ctx, h.team, "c", 0)
		if !errors.Is(err, errdefs.ErrResourceExhausted) || errdefs.Status(err) != http.StatusTooManyRequests {
			t.Errorf("third volume: %v; want 429", err)
		}
	})
	t.Run("a volume the host's disk cannot hold is refused with 507, naming sizeMB", func(t *testing.T) {
		other := "other-team"
		_, err := volumesOf(h).CreateVolume(ctx, other, "huge", int(snapshot.MaxVolumeBytes>>20))
		if errdefs.Status(err) != http.StatusInsufficientStorage || !strings.Contains(err.Error(), "sizeMB") {
			t.Errorf("a 1 TiB volume: %v (status %d); want 507 naming sizeMB", err, errdefs.Status(err))
		}
	})
}
