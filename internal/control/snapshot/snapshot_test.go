package snapshot_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/internal/control/snapshot"
)

func TestStore(t *testing.T) {
	st, err := snapshot.Open(t.Context(), t.TempDir(), newDB(t), "")
	if err != nil {
		t.Fatal(err)
	}
	save := func(team, sandbox, name string, at time.Time) *snapshot.Snapshot {
		sn := &snapshot.Snapshot{ID: snapshot.NewID(), TeamID: team, SandboxID: sandbox, Name: name, CreatedAt: at}
		if err := os.Mkdir(st.Dir(sn.ID), 0o700); err != nil { // what the runtime's export makes
			t.Fatal(err)
		}
		if err := st.Save(sn); err != nil {
			t.Fatal(err)
		}
		return sn
	}
	now := time.Now()
	a := save("t1", "i1", "first", now.Add(-time.Minute))
	b := save("t1", "i2", "", now)
	save("t2", "i3", "other team", now)
	if err := os.Mkdir(st.Dir(snapshot.NewID()), 0o700); err != nil { // half made: no record
		t.Fatal(err)
	}
	t.Run("a team lists its own snapshots, newest first, and never a half-made one", func(t *testing.T) {
		got, err := st.List(snapshot.Filter{TeamID: "t1"})
		if err != nil || len(got) != 2 || got[0].ID != b.ID || got[1].ID != a.ID {
			t.Fatalf("list: %v %v, want %s then %s", got, err, b.ID, a.ID)
		}
	})
	t.Run("filters by sandbox and name", func(t *testing.T) {
		if got, _ := st.List(snapshot.Filter{TeamID: "t1", SandboxID: "i1"}); len(got) != 1 || got[0].ID != a.ID {
			t.Errorf("by sandbox: %v", got)
		}
		if got, _ := st.List(snapshot.Filter{Name: "first"}); len(got) != 1 || got[0].ID != a.ID {
			t.Errorf("by name: %v", got)
		}
	})
	t.Run("a deleted snapshot is gone with its files", func(t *testing.T) {
		if err := st.Delete(a.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Get(a.ID); !errors.Is(err, snapshot.ErrNotFound) {
			t.Errorf("get after delete: %v", err)
		}
		if _, err := os.Stat(st.Dir(a.ID)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("files after delete: %v", err)
		}
		if err := st.Delete(a.ID); !errors.Is(err, snapshot.ErrNotFound) {
			t.Errorf("delete twice: %v", err)
		}
	})
	t.Run("ids that are not snapshot ids are not found", func(t *testing.T) {
		for _, id := range []string{"base", "../etc", "snap-xyz"} {
			if _, err := st.Get(id); !errors.Is(err, snapshot.ErrNotFound) {
				t.Errorf("get %q: %v", id, err)
			}
		}
	})
}

func TestVolumes(t *testing.T) {
	vs, err := snapshot.OpenVolumes(t.Context(), t.TempDir(), newDB(t), "")
	if err != nil {
		t.Fatal(err)
	}
	a, err := vs.Create("t1", "data", 0, snapshot.VolumeLimits{})
	if err != nil {
		t.Fatal(err)
	}
	t.Run("a name is unique per team, and another team may use it", func(t *testing.T) {
		if _, err := vs.Create("t1", "data", 0, snapshot.VolumeLimits{}); !errors.Is(err, snapshot.ErrVolumeExists) {
			t.Errorf("a second t1 volume named data: %v", err)
		}
		if _, err := vs.Create("t2", "data", 0, snapshot.VolumeLimits{}); err != nil {
			t.Errorf("t2's volume named data: %v", err)
		}
	})
	t.Run("bad names are refused", func(t *testing.T) {
		for _, name := range []string{"", "../x", "a/b", ".hidden"} {
			if _, err := vs.Create("t1", name, 0, snapshot.VolumeLimits{}); !errors.Is(err, snapshot.ErrVolumeName) {
				t.Errorf("create %q: %v", name, err)
			}
		}
	})
	t.Run("a team finds its volume by id or name, never another team's", func(t *testing.T) {
		for _, key := range []string{a.ID, "data"} {
			if got, err := vs.Get("t1", key); err != nil || got.ID != a.ID {
				t.Errorf("get %q: %v %v", key, got, err)
			}
		}
		if _, err := vs.Get("t2", a.ID); !errors.Is(err, snapshot.ErrVolumeNotFound) {
			t.Errorf("t2 gets t1's volume: %v", err)
		}
	})
	t.Run("a deleted volume is gone with its files", func(t *testing.T) {
		if err := os.WriteFile(vs.DataDir(a.ID)+"/f", []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := vs.Delete("t1", a.ID, func(string) bool { return false }); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(vs.DataDir(a.ID)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("files after delete: %v", err)
		}
		if l, _ := vs.List("t1"); len(l) != 0 {
			t.Errorf("list after delete: %v", l)
		}
	})
}

func TestOpenRemovesWhatACrashLeftHalfMade(t *testing.T) {
	dir, db := t.TempDir(), newDB(t)
	st, err := snapshot.Open(t.Context(), dir, db, "")
	if err != nil {
		t.Fatal(err)
	}
	kept := &snapshot.Snapshot{ID: snapshot.NewID(), TeamID: "t1", CreatedAt: time.Now()}
	half := st.Dir(snapshot.NewID())
	fork := st.TempDir()
	for _, d := range []string{st.Dir(kept.ID), half, fork} {
		if err := os.MkdirAll(d+"/checkpoint", 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Save(kept); err != nil {
		t.Fatal(err)
	}
	if _, err := snapshot.Open(t.Context(), dir, db, ""); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{half, fork} {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is left after Open: %v", d, err)
		}
	}
	if _, err := st.Get(kept.ID); err != nil {
		t.Errorf("a whole snapshot was removed: %v", err)
	}
}

func TestVolumeLimits(t *testing.T) {
	t.Run("a team holds at most Count volumes, another team is not charged", func(t *testing.T) {
		vs, err := snapshot.OpenVolumes(t.Context(), t.TempDir(), newDB(t), "")
		if err != nil {
			t.Fatal(err)
		}
		lim := snapshot.VolumeLimits{Count: 2}
		for _, name := range []string{"a", "b"} {
			if _, err := vs.Create("t1", name, 0, lim); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := vs.Create("t1", "c", 0, lim); !errors.Is(err, snapshot.ErrVolumeQuota) {
			t.Errorf("a third volume: %v; want ErrVolumeQuota", err)
		}
		if _, err := vs.Create("t2", "c", 0, lim); err != nil {
			t.Errorf("another team's volume: %v", err)
		}
	})
	t.Run("a volume larger than the free space above the floor is refused and leaves nothing", func(t *testing.T) {
		vs, err := snapshot.OpenVolumes(t.Context(), t.TempDir(), newDB(t), "")
		if err != nil {
			t.Fatal(err)
		}
		_, err = vs.Create("t1", "huge", snapshot.MaxVolumeBytes, snapshot.VolumeLimits{FreeFloor: 1 << 30})
		if !errors.Is(err, snapshot.ErrVolumeNoSpace) {
			t.Fatalf("a 1 TiB volume: %v; want ErrVolumeNoSpace", err)
		}
		if l, _ := vs.List("t1"); len(l) != 0 {
			t.Errorf("left behind: %v", l)
		}
	})
	if os.Geteuid() != 0 {
		t.Skip("sized volumes are loop-mounted ext4 images on a tmpfs: needs root")
	}
	if _, err := exec.LookPath("mke2fs"); err != nil {
		t.Skip("mke2fs not found (Debian package e2fsprogs)")
	}
	disk := t.TempDir()
	if err := unix.Mount("tmpfs", disk, "tmpfs", 0, "size=64m"); err != nil {
		t.Skipf("mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(disk, unix.MNT_DETACH) })
	vs, err := snapshot.OpenVolumes(t.Context(), filepath.Join(disk, "volumes"), newDB(t), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		l, _ := vs.List("t1")
		for _, v := range l {
			_ = vs.Delete("t1", v.ID, func(string) bool { return false })
		}
	})
	t.Run("a team's volumes hold at most Bytes in all", func(t *testing.T) {
		lim := snapshot.VolumeLimits{Bytes: 12 << 20}
		if _, err := vs.Create("t1", "eight", 8<<20, lim); err != nil {
			t.Fatal(err)
		}
		if _, err := vs.Create("t1", "more", 8<<20, lim); !errors.Is(err, snapshot.ErrVolumeQuota) {
			t.Errorf("8 MiB more: %v; want ErrVolumeQuota", err)
		}
	})
	t.Run("a sparse volume's unwritten size is owed to it, not free to the next", func(t *testing.T) {
		lim := snapshot.VolumeLimits{FreeFloor: 8 << 20}
		if _, err := vs.Create("t1", "big", 32<<20, lim); err != nil {
			t.Fatal(err)
		}
		// The tmpfs has about 63 MiB free, of which 8 + 32 (big) + 8 (eight) are owed or kept.
		if _, err := vs.Create("t1", "next", 20<<20, lim); !errors.Is(err, snapshot.ErrVolumeNoSpace) {
			t.Errorf("20 MiB more: %v; want ErrVolumeNoSpace", err)
		}
		if _, err := vs.Create("t1", "small", 4<<20, lim); err != nil {
			t.Errorf("4 MiB more: %v", err)
		}
	})
}
