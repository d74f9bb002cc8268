package snapshot_test

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/cove-dev/cove/internal/blob"
	"github.com/cove-dev/cove/internal/blob/blobtest"
	"github.com/cove-dev/cove/internal/control/snapshot"
	"github.com/cove-dev/cove/internal/store"
)

// cluster is the nodes of a test's cluster, each the other's VolumePeers: a Release asks the
// named node's real Volumes, with what that node says is alive.
type cluster struct {
	mu    sync.Mutex
	nodes map[string]*snapshot.Volumes
	lost  map[string]bool
	live  map[string]bool // sandbox ids alive, on whichever node
}

func (c *cluster) NodeAlive(_ context.Context, node string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[node] != nil && !c.lost[node]
}

func (c *cluster) Release(ctx context.Context, node, id string) error {
	return c.nodes[node].Release(ctx, id, c.alive)
}

func (c *cluster) alive(sandboxID string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.live[sandboxID]
}

func (c *cluster) set(m map[string]bool, k string, v bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m[k] = v
}

// newCluster opens nodes a and b over one store and one bucket of a real S3 server.
func newCluster(t *testing.T) (*cluster, blob.Store, store.Volumes) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a sized volume is a loop-mounted ext4 image: needs root")
	}
	if _, err := exec.LookPath("mke2fs"); err != nil {
		t.Skip("mke2fs not found (Debian package e2fsprogs)")
	}
	srv := blobtest.Start(t, "", "cove")
	objects, err := blob.OpenS3(t.Context(), blob.S3Config{Bucket: "cove", Endpoint: srv.Endpoint, PartSize: 5 << 20})
	if err != nil {
		t.Fatal(err)
	}
	db := newDB(t)
	c := &cluster{nodes: map[string]*snapshot.Volumes{}, lost: map[string]bool{}, live: map[string]bool{}}
	for _, name := range []string{"a", "b"} {
		vs, err := snapshot.OpenVolumes(t.Context(), t.TempDir(), db, name)
		if err != nil {
			t.Fatal(err)
		}
		vs.Share(t.Context(), objects, c)
		c.nodes[name] = vs
		t.Cleanup(func() { _, _ = vs.UnmountIdle(func(string) bool { return false }) })
	}
	return c, objects, db
}

func readVolumeFile(t *testing.T, vs *snapshot.Volumes, vol *snapshot.Volume, name string) string {
	t.Helper()
	files, err := vs.Files(vol)
	if err != nil {
		t.Fatal(err)
	}
	defer files.Close()
	f, _, err := files.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, _ := io.ReadAll(f)
	return string(b)
}

func writeVolumeFile(t *testing.T, vs *snapshot.Volumes, vol *snapshot.Volume, name, body string) {
	t.Helper()
	files, err := vs.Files(vol)
	if err != nil {
		t.Fatal(err)
	}
	defer files.Close()
	if _, err := files.Write(name, strings.NewReader(body), true, snapshot.Meta{}); err != nil {
		t.Fatal(err)
	}
}

func TestVolumesMoveBetweenNodes(t *testing.T) {
	c, objects, db := newCluster(t)
	a, b := c.nodes["a"], c.nodes["b"]
	ctx := t.Context()
	vol, err := a.Create("t1", "data", 64<<20, snapshot.VolumeLimits{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Delete("t1", vol.ID, c.alive) })
	writeVolumeFile(t, a, vol, "/kept.txt", "written on a")

	t.Run("every node lists the team's volumes, and a name is the team's once in the cluster", func(t *testing.T) {
		got, err := b.Get("t1", "data")
		if err != nil || got.ID != vol.ID {
			t.Fatalf("node b's view: %+v %v", got, err)
		}
		if _, err := b.Create("t1", "data", 8<<20, snapshot.VolumeLimits{}); !errors.Is(err, snapshot.ErrVolumeExists) {
			t.Fatalf("the same name on node b: %v", err)
		}
	})
	t.Run("a volume released is published sparse, and mounted on another node with its files", func(t *testing.T) {
		if err := a.Release(ctx, vol.ID, c.alive); err != nil {
			t.Fatal(err)
		}
		r, err := db.GetVolume(ctx, vol.ID)
		if err != nil || r.Node != "" || r.Version != 1 || r.UsedBytes == 0 {
			t.Fatalf("the released record: %+v %v", r, err)
		}
		info, err := objects.Stat(ctx, "volumes/"+vol.ID+"/1.tar")
		if err != nil {
			t.Fatal(err)
		}
		if info.Size > 16<<20 {
			t.Errorf("a 64 MiB image with a few bytes written took %d bytes in the object store: not sparse", info.Size)
		}
		if got := readVolumeFile(t, b, vol, "kept.txt"); got != "written on a" {
			t.Errorf("read on node b: %q", got)
		}
		if r, _ := db.GetVolume(ctx, vol.ID); r.Node != "b" {
			t.Errorf("held by %q after node b mounted it", r.Node)
		}
	})
	t.Run("a node asks the holder to let go, which it refuses while a sandbox there mounts the volume", func(t *testing.T) {
		c.set(c.live, "sb-1", true)
		if err := b.Attach(ctx, vol, "sb-1", "/data", false, c.alive); err != nil {
			t.Fatal(err)
		}
		writeVolumeFile(t, b, vol, "/from-b.txt", "written on b")
		err := a.Hold(ctx, vol)
		if !errors.Is(err, snapshot.ErrVolumeInUse) || !strings.Contains(err.Error(), "sb-1") {
			t.Fatalf("a hold while sb-1 on node b mounts it: %v", err)
		}
		c.set(c.live, "sb-1", false) // the sandbox ends, or moves
		if got := readVolumeFile(t, a, vol, "from-b.txt"); got != "written on b" {
			t.Errorf("read on node a after node b let go: %q", got)
		}
		// A release keeps the lease: a sandbox that moves mounts the volume again where it
		// goes, at the same path (the next claim sweeps it once the sandbox is gone).
		if m, err := a.MountsOf("t1", "sb-1"); err != nil || len(m) != 1 || m[0].Path != "/data" {
			t.Errorf("sb-1's mounts after the release: %+v %v", m, err)
		}
		if _, err := objects.Stat(ctx, "volumes/"+vol.ID+"/1.tar"); !errors.Is(err, blob.ErrNotFound) {
			t.Errorf("the superseded version is still kept: %v", err)
		}
	})
	t.Run("a node takes a lost node's volume from its last published version", func(t *testing.T) {
		if err := a.Release(ctx, vol.ID, c.alive); err != nil {
			t.Fatal(err)
		}
		if err := a.Hold(ctx, vol); err != nil { // held again on a, by its own copy
			t.Fatal(err)
		}
		writeVolumeFile(t, a, vol, "/unpublished.txt", "lost with a")
		c.set(c.lost, "a", true)
		t.Cleanup(func() { c.set(c.lost, "a", false) })
		if got := readVolumeFile(t, b, vol, "from-b.txt"); got != "written on b" {
			t.Errorf("read on node b: %q", got)
		}
		files, err := b.Files(vol)
		if err != nil {
			t.Fatal(err)
		}
		defer files.Close()
		if _, err := files.Stat("/unpublished.txt"); !errors.Is(err, snapshot.ErrPathNotFound) {
			t.Errorf("a file the lost node never published: %v", err)
		}
	})
	t.Run("a volume whose files never left a lost node is ErrVolumeLost", func(t *testing.T) {
		other, err := b.Create("t1", "never-published", 8<<20, snapshot.VolumeLimits{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Delete("t1", other.ID, c.alive) })
		c.set(c.lost, "b", true)
		t.Cleanup(func() { c.set(c.lost, "b", false) })
		if err := a.Hold(ctx, other); !errors.Is(err, snapshot.ErrVolumeLost) {
			t.Fatalf("a hold of it: %v", err)
		}
	})
	t.Run("a volume without a size (a plain directory) moves too", func(t *testing.T) {
		plain, err := a.Create("t1", "plain", 0, snapshot.VolumeLimits{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Delete("t1", plain.ID, c.alive) })
		writeVolumeFile(t, a, plain, "/dir/p.txt", "plain on a")
		if err := a.Release(ctx, plain.ID, c.alive); err != nil {
			t.Fatal(err)
		}
		if got := readVolumeFile(t, b, plain, "dir/p.txt"); got != "plain on a" {
			t.Errorf("read on node b: %q", got)
		}
	})
	t.Run("a deleted volume's images leave the object store", func(t *testing.T) {
		if err := b.Release(ctx, vol.ID, c.alive); err != nil {
			t.Fatal(err)
		}
		if err := a.Delete("t1", vol.ID, c.alive); err != nil {
			t.Fatal(err)
		}
		if left, _ := objects.List(ctx, "volumes/"+vol.ID+"/"); len(left) != 0 {
			t.Errorf("left in the object store: %v", left)
		}
		// Node b's copy, which node a could not reach, goes when node b joins again.
		home := filepath.Dir(b.DataDir(vol.ID))
		if _, err := os.Stat(home); err != nil {
			t.Fatalf("node b kept no copy to remove: %v", err)
		}
		b.Share(ctx, objects, c)
		if _, err := os.Stat(home); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("node b's copy of the deleted volume: %v", err)
		}
	})
}

func TestOneBoxCopiesNoVolume(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a sized volume is a loop-mounted ext4 image: needs root")
	}
	if _, err := exec.LookPath("mke2fs"); err != nil {
		t.Skip("mke2fs not found (Debian package e2fsprogs)")
	}
	db := newDB(t)
	dir := t.TempDir()
	vs, err := snapshot.OpenVolumes(t.Context(), dir, db, "")
	if err != nil {
		t.Fatal(err)
	}
	vol, err := vs.Create("t1", "data", 8<<20, snapshot.VolumeLimits{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = vs.Delete("t1", vol.ID, func(string) bool { return false }) })
	if err := vs.Release(t.Context(), vol.ID, func(string) bool { return false }); err != nil {
		t.Fatal(err)
	}
	r, err := db.GetVolume(t.Context(), vol.ID)
	if err != nil || r.Node != "" || r.Version != 0 {
		t.Fatalf("the record after a release on one box: %+v %v", r, err)
	}
	if _, err := os.Stat(filepath.Join(dir, vol.ID, "published")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("one box published its volume: %v", err)
	}
	if vs.Shared() {
		t.Error("a lone server's volumes say they are shared")
	}
}
