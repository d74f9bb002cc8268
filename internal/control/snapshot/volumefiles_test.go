package snapshot_test

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/internal/control/snapshot"
	"github.com/cove-dev/cove/internal/sandbox/runtime"
	"github.com/cove-dev/cove/internal/store"
)

func openFiles(t *testing.T, size int64) (*snapshot.Volumes, *snapshot.Volume, *snapshot.Files, store.Records) {
	t.Helper()
	db := newDB(t)
	vs, err := snapshot.OpenVolumes(t.Context(), t.TempDir(), db, "")
	if err != nil {
		t.Fatal(err)
	}
	vol, err := vs.Create("t1", "data", size, snapshot.VolumeLimits{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = vs.Delete("t1", vol.ID, func(string) bool { return false }) })
	files, err := vs.Files(vol)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { files.Close() })
	return vs, vol, files, db
}

func TestVolumeFiles(t *testing.T) {
	vs, vol, files, _ := openFiles(t, 0)
	data := vs.DataDir(vol.ID)
	t.Run("a file written is read back, listed and stated with its path in the volume", func(t *testing.T) {
		e, err := files.Write("/docs/a.txt", strings.NewReader("hello"), true, snapshot.Meta{})
		if err != nil {
			t.Fatal(err)
		}
		if e.Path != "/docs/a.txt" || e.Info.Size() != 5 {
			t.Errorf("written entry: %s %d", e.Path, e.Info.Size())
		}
		f, _, err := files.Open("docs/a.txt")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(f)
		f.Close()
		if string(b) != "hello" {
			t.Errorf("read back %q", b)
		}
		list, err := files.List("/", 2)
		if err != nil || len(list) != 2 || list[0].Path != "/docs" || list[1].Path != "/docs/a.txt" {
			t.Errorf("list depth 2: %v %v", list, err)
		}
		if list, _ := files.List("/", 1); len(list) != 1 {
			t.Errorf("list depth 1: %v", list)
		}
		if st, ok := list[0].Info.Sys().(*syscall.Stat_t); os.Geteuid() == 0 && (!ok || st.Uid != snapshot.DefaultUID) {
			t.Errorf("the directory the write made belongs to %v, not the sandboxes' user", list[0].Info.Sys())
		}
	})
	t.Run("an overwrite replaces the file and leaves no temporary file behind", func(t *testing.T) {
		if _, err := files.Write("/docs/a.txt", strings.NewReader("bye"), false, snapshot.Meta{}); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(filepath.Join(data, "docs/a.txt")); string(b) != "bye" {
			t.Errorf("after overwrite: %q", b)
		}
		if list, _ := files.List("/docs", 1); len(list) != 1 {
			t.Errorf("docs holds %v", list)
		}
	})
	t.Run("a write into a missing directory without force is not found", func(t *testing.T) {
		if _, err := files.Write("/nope/a", strings.NewReader("x"), false, snapshot.Meta{}); !errors.Is(err, snapshot.ErrPathNotFound) {
			t.Errorf("write: %v", err)
		}
	})
	t.Run("make dir needs force for missing parents and refuses an existing one", func(t *testing.T) {
		if _, err := files.MakeDir("/x/y", false, snapshot.Meta{}); !errors.Is(err, snapshot.ErrPathNotFound) {
			t.Errorf("without force: %v", err)
		}
		mode := fs.FileMode(0o700)
		e, err := files.MakeDir("/x/y", true, snapshot.Meta{Mode: &mode})
		if err != nil || !e.Info.IsDir() || e.Info.Mode().Perm() != 0o700 {
			t.Errorf("with force: %v %v", e, err)
		}
		if _, err := files.MakeDir("/x/y", false, snapshot.Meta{}); !errors.Is(err, snapshot.ErrPathExists) {
			t.Errorf("again: %v", err)
		}
		if _, err := files.MakeDir("/x/y", true, snapshot.Meta{}); err != nil {
			t.Errorf("again with force (mkdir -p): %v", err)
		}
		if _, err := files.MakeDir("/docs/a.txt", true, snapshot.Meta{}); !errors.Is(err, snapshot.ErrPathExists) {
			t.Errorf("over a file with force: %v", err)
		}
	})
	t.Run("metadata updates change owner and mode", func(t *testing.T) {
		uid, mode := 1234, fs.FileMode(0o600)
		e, err := files.SetMeta("/docs/a.txt", snapshot.Meta{UID: &uid, Mode: &mode})
		if err != nil || e.Info.Mode().Perm() != 0o600 {
			t.Fatalf("set meta: %v %v", e, err)
		}
		fi, err := os.Stat(filepath.Join(data, "docs/a.txt"))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("on disk: %v %v", fi, err)
		}
		if st := fi.Sys().(*syscall.Stat_t); os.Geteuid() == 0 && st.Uid != 1234 {
			t.Errorf("on disk the owner is %d, want 1234", st.Uid)
		}
	})
	t.Run("paths that climb out of the volume are refused", func(t *testing.T) {
		for _, p := range []string{"../x", "/a/../../x", "..", "a\x00b"} {
			if _, err := files.Stat(p); !errors.Is(err, snapshot.ErrPathInvalid) {
				t.Errorf("stat %q: %v", p, err)
			}
		}
	})
	t.Run("a symlink a sandbox made out of the volume is never followed", func(t *testing.T) {
		secret := filepath.Join(t.TempDir(), "secret")
		if err := os.WriteFile(secret, []byte("host"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Dir(secret), filepath.Join(data, "out")); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("../../../../../../"+secret, filepath.Join(data, "rel")); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{"/out/secret", "/rel"} {
			if f, _, err := files.Open(p); !errors.Is(err, snapshot.ErrPathInvalid) {
				if f != nil {
					f.Close()
				}
				t.Errorf("read %q: %v", p, err)
			}
		}
		if _, err := files.Write("/out/secret", strings.NewReader("x"), false, snapshot.Meta{}); !errors.Is(err, snapshot.ErrPathInvalid) {
			t.Errorf("write through the link: %v", err)
		}
		// A write replaces the link itself, inside the volume.
		if e, err := files.Write("/rel", strings.NewReader("x"), false, snapshot.Meta{}); err != nil || !e.Info.Mode().IsRegular() {
			t.Errorf("write over the link: %v %v", e, err)
		}
		if b, _ := os.ReadFile(secret); string(b) != "host" {
			t.Errorf("the host file changed: %q", b)
		}
		e, err := files.Stat("/out")
		if err != nil || e.Target != filepath.Dir(secret) {
			t.Errorf("stat of the link itself: %v %v", e, err)
		}
	})
	t.Run("remove takes a directory with its files; a missing path is not found; the root stays", func(t *testing.T) {
		if err := files.Remove("/x"); err != nil {
			t.Fatal(err)
		}
		if err := files.Remove("/x"); !errors.Is(err, snapshot.ErrPathNotFound) {
			t.Errorf("remove twice: %v", err)
		}
		if err := files.Remove("/"); !errors.Is(err, snapshot.ErrPathInvalid) {
			t.Errorf("remove /: %v", err)
		}
	})
}

func TestVolumeLeases(t *testing.T) {
	vs, err := snapshot.OpenVolumes(t.Context(), t.TempDir(), newDB(t), "")
	if err != nil {
		t.Fatal(err)
	}
	vol, err := vs.Create("t1", "shared", 0, snapshot.VolumeLimits{})
	if err != nil {
		t.Fatal(err)
	}
	live := map[string]bool{"a": true, "b": true, "c": true}
	alive := func(id string) bool { return live[id] }
	t.Run("one sandbox mounts it read-write, a second read-write mount is busy, naming the volume", func(t *testing.T) {
		if err := vs.Claim(vol, "a", "/mnt/a", false, alive); err != nil {
			t.Fatal(err)
		}
		err := vs.Claim(vol, "b", "/mnt/b", false, alive)
		if !errors.Is(err, snapshot.ErrVolumeBusy) || !strings.Contains(err.Error(), "shared") || !strings.Contains(err.Error(), "sandbox a") {
			t.Errorf("second read-write: %v", err)
		}
	})
	t.Run("read-only mounts are never refused", func(t *testing.T) {
		for _, id := range []string{"b", "c"} {
			if err := vs.Claim(vol, id, "/ro", true, alive); err != nil {
				t.Errorf("read-only %s: %v", id, err)
			}
		}
		if got := vs.Holders(vol, alive); strings.Join(got, ",") != "a,b,c" {
			t.Errorf("holders: %v", got)
		}
	})
	t.Run("a sandbox's mounts read back with their paths and modes", func(t *testing.T) {
		got, err := vs.MountsOf("t1", "b")
		if err != nil || len(got) != 1 || got[0].Path != "/ro" || !got[0].ReadOnly || got[0].Volume.ID != vol.ID {
			t.Errorf("mounts of b: %+v %v", got, err)
		}
		if got, _ := vs.MountsOf("t2", "b"); len(got) != 0 {
			t.Errorf("another team sees %+v", got)
		}
	})
	t.Run("a volume in use is not deleted", func(t *testing.T) {
		if err := vs.Delete("t1", vol.ID, alive); !errors.Is(err, snapshot.ErrVolumeInUse) {
			t.Errorf("delete: %v", err)
		}
	})
	t.Run("a volume deleted meanwhile is not claimed", func(t *testing.T) {
		gone, err := vs.Create("t1", "gone", 0, snapshot.VolumeLimits{})
		if err != nil {
			t.Fatal(err)
		}
		if err := vs.Delete("t1", gone.ID, alive); err != nil {
			t.Fatal(err)
		}
		if err := vs.Claim(gone, "a", "/g", true, alive); !errors.Is(err, snapshot.ErrVolumeNotFound) {
			t.Errorf("claim of a deleted volume: %v", err)
		}
		if _, err := os.Stat(filepath.Dir(vs.DataDir(gone.ID))); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the claim left its directory: %v", err)
		}
	})
	t.Run("once the writer is gone another sandbox mounts it read-write", func(t *testing.T) {
		delete(live, "a")
		if err := vs.Claim(vol, "d", "/d", false, func(id string) bool { return id == "d" || alive(id) }); err != nil {
			t.Errorf("after the writer died: %v", err)
		}
	})
}

// TestVolumeQuota needs root, loop devices and mke2fs: a sized volume is an ext4 image.
func TestVolumeQuota(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a sized volume is a loop-mounted ext4 image: needs root")
	}
	if _, err := exec.LookPath("mke2fs"); err != nil {
		t.Skip("mke2fs not found (Debian package e2fsprogs)")
	}
	vs, vol, files, db := openFiles(t, 8<<20)
	if _, err := files.Write("/keep", strings.NewReader("kept"), false, snapshot.Meta{}); err != nil {
		t.Fatal(err)
	}
	t.Run("a write past the size is ErrVolumeFull and leaves the file as it was", func(t *testing.T) {
		_, err := files.Write("/keep", bytes.NewReader(make([]byte, 16<<20)), false, snapshot.Meta{})
		if !errors.Is(err, snapshot.ErrVolumeFull) {
			t.Fatalf("16 MiB into 8: %v", err)
		}
		if b, _ := os.ReadFile(filepath.Join(vs.DataDir(vol.ID), "keep")); string(b) != "kept" {
			t.Errorf("after the failed write: %q", b)
		}
		if list, _ := files.List("/", 1); len(list) != 1 {
			t.Errorf("left behind: %v", list)
		}
	})
	t.Run("usage counts what the files take, and the root holds no lost+found", func(t *testing.T) {
		if _, err := files.Write("/mb", bytes.NewReader(make([]byte, 1<<20)), false, snapshot.Meta{}); err != nil {
			t.Fatal(err)
		}
		used, err := vs.Usage(vol)
		if err != nil || used < 1<<20 || used > 4<<20 {
			t.Errorf("usage: %d %v", used, err)
		}
		if _, err := files.Stat("/lost+found"); !errors.Is(err, snapshot.ErrPathNotFound) {
			t.Errorf("lost+found: %v", err)
		}
	})
	t.Run("opening the store mounts a sized volume found unmounted, with its files", func(t *testing.T) {
		if err := runtime.UnmountDisk(vs.DataDir(vol.ID)); err != nil {
			t.Fatal(err)
		}
		again, err := snapshot.OpenVolumes(t.Context(), filepath.Dir(filepath.Dir(vs.DataDir(vol.ID))), db, "")
		if err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(filepath.Join(again.DataDir(vol.ID), "keep")); string(b) != "kept" {
			t.Errorf("after a new mount: %q %v", b, err)
		}
	})
	t.Run("a mount found gone while the filesystem is still in use mounts that same filesystem", func(t *testing.T) {
		// What a sandbox's bind does: hold the filesystem after the host's mount goes.
		hold := t.TempDir()
		if err := unix.Mount(vs.DataDir(vol.ID), hold, "", unix.MS_BIND, ""); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = unix.Unmount(hold, unix.MNT_DETACH) })
		if err := runtime.UnmountDisk(vs.DataDir(vol.ID)); err != nil {
			t.Fatal(err)
		}
		if err := vs.Mount(vol); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(hold, "via-hold"), []byte("one"), 0o644); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(filepath.Join(vs.DataDir(vol.ID), "via-hold")); string(b) != "one" {
			t.Errorf("the new mount does not see the held filesystem's write: %q", b)
		}
		_ = os.Remove(filepath.Join(hold, "via-hold"))
	})
	t.Run("a stop unmounts the sized volumes no live sandbox holds, and keeps the held ones", func(t *testing.T) {
		idle, err := vs.Create("t1", "idle", 4<<20, snapshot.VolumeLimits{})
		if err != nil {
			t.Fatal(err)
		}
		if err := vs.Claim(vol, "sb-live", "/data", false, func(string) bool { return true }); err != nil {
			t.Fatal(err)
		}
		ids, err := vs.UnmountIdle(func(id string) bool { return id == "sb-live" })
		if err != nil || !slices.Equal(ids, []string{idle.ID}) {
			t.Fatalf("unmounted %v, %v; want only %s", ids, err, idle.ID)
		}
		if m, _ := runtime.IsMountPoint(vs.DataDir(idle.ID)); m {
			t.Errorf("the idle volume is still mounted")
		}
		if m, _ := runtime.IsMountPoint(vs.DataDir(vol.ID)); !m {
			t.Errorf("the held volume was unmounted")
		}
		if err := vs.Delete("t1", idle.ID, func(string) bool { return false }); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("a deleted volume is unmounted and gone", func(t *testing.T) {
		files.Close()
		if err := vs.Delete("t1", vol.ID, func(string) bool { return false }); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(vs.DataDir(vol.ID)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("after delete: %v", err)
		}
	})
}
