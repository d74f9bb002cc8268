package snapshot

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cove-dev/cove/internal/blob"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/sandbox/runtime"
	"github.com/cove-dev/cove/internal/store"
)

// Volumes in a cluster (issue 24). A volume's live files are on one node at a time, the one
// its record names (store.Volume.Node); that node's sandboxes mount it as on one box. When
// its last sandbox there lets go of it (a kill, or a move to another node), the node
// publishes its image to the object store, volumes/<id>/<version>.tar, and lets go of the
// record (node "", the version current). The next node to mount it takes the record
// (store.MoveVolume: from the node that holds it, so two nodes never hold it at once),
// fetches that version unless its own copy is it, and mounts. A node that needs a volume
// another live node holds asks it to publish and let go (VolumePeers.Release), which it
// refuses while a sandbox there mounts it; a lost node's volume is taken from its last
// published version. On one box (no Share) none of this runs: nothing is copied.

// VolumePeers is what a node asks of the cluster's other nodes about volumes.
type VolumePeers interface {
	// NodeAlive says whether node holds its lease (the volumes it holds are live there).
	NodeAlive(ctx context.Context, node string) bool
	// Release asks node, which holds volume id, to publish it and let go of it: an error
	// wrapping ErrVolumeInUse (naming the sandbox) while a live sandbox there mounts it.
	Release(ctx context.Context, node, id string) error
}

// ErrVolumeLost: the volume's files were on a lost node and never reached the object store.
var ErrVolumeLost = errors.New("volume lost with its node")

// Share makes v a node of a cluster: its volumes' images go through objects between nodes,
// and peers are the other nodes. It removes the copies this node kept of volumes deleted
// since (through another node, which could not reach them) and what a fetch cut short left.
func (v *Volumes) Share(ctx context.Context, objects blob.Store, peers VolumePeers) {
	v.objects, v.peers = objects, peers
	entries, _ := os.ReadDir(v.dir)
	for _, e := range entries {
		name := e.Name()
		switch {
		case strings.HasPrefix(name, ".fetch-") || strings.HasSuffix(name, ".fetched"):
			_ = os.RemoveAll(filepath.Join(v.dir, name))
		case volumeID.MatchString(name):
			if _, err := v.db.GetVolume(ctx, name); errors.Is(err, store.ErrNotFound) {
				if runtime.UnmountDisk(v.DataDir(name)) == nil {
					_ = os.RemoveAll(filepath.Join(v.dir, name))
				}
			}
		}
	}
}

// Shared says whether v is a node of a cluster whose volumes move between nodes.
func (v *Volumes) Shared() bool { return v.objects != nil }

// listNode is the node whose volumes List shows: every node's in a cluster.
func (v *Volumes) listNode() string {
	if v.objects != nil {
		return store.AllNodes
	}
	return v.node
}

// lock takes volume id's lock and returns its release.
func (v *Volumes) lock(id string) func() {
	mu, _ := v.locks.LoadOrStore(id, &sync.Mutex{})
	mu.(*sync.Mutex).Lock()
	return mu.(*sync.Mutex).Unlock
}

// imageKey is where version ver of volume id's files is kept in the object store.
func imageKey(id string, ver int64) string {
	return "volumes/" + id + "/" + strconv.FormatInt(ver, 10) + ".tar"
}

// publishedName is the file beside a volume's files that says which version of them this
// node's copy is (the one it last published or fetched); it is left out of the image.
const publishedName = "published"

func (v *Volumes) localVersion(id string) int64 {
	b, err := os.ReadFile(filepath.Join(v.dir, id, publishedName))
	if err != nil {
		return -1
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return -1
	}
	return n
}

func (v *Volumes) setLocalVersion(id string, ver int64) error {
	return os.WriteFile(filepath.Join(v.dir, id, publishedName), []byte(strconv.FormatInt(ver, 10)+"\n"), 0o600)
}

// Attach holds vol on this node (fetched if another released it), mounts it and claims it
// for sandbox sandboxID at path, as Claim does: what a create calls per volume.
func (v *Volumes) Attach(ctx context.Context, vol *Volume, sandboxID, path string, readOnly bool, alive func(sandboxID string) bool) error {
	unlock := v.lock(vol.ID)
	defer unlock()
	if err := v.hold(ctx, vol); err != nil {
		return err
	}
	return v.Claim(vol, sandboxID, path, readOnly, alive)
}

// Hold makes vol's live files this node's and mounts them: on one box (or when this node
// holds it) a Mount; in a cluster it takes vol over from the object store, or from the node
// that holds it, which publishes it first.
func (v *Volumes) Hold(ctx context.Context, vol *Volume) error {
	unlock := v.lock(vol.ID)
	defer unlock()
	return v.hold(ctx, vol)
}

// hold is Hold under vol's lock; it updates vol's Node and Version.
func (v *Volumes) hold(ctx context.Context, vol *Volume) error {
	if v.objects == nil {
		return v.Mount(vol)
	}
	for range 3 { // another node may take it between a read and a move: read again
		r, err := v.db.GetVolume(ctx, vol.ID)
		if errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("%w: %s", ErrVolumeNotFound, vol.ID)
		}
		if err != nil {
			return fmt.Errorf("volume %s: %w", vol.Name, err)
		}
		vol.Node, vol.Version, vol.UsedBytes = r.Node, r.Version, r.UsedBytes
		if r.Node == v.node {
			return v.Mount(vol)
		}
		if r.Node != "" {
			if v.peers.NodeAlive(ctx, r.Node) {
				if err := v.peers.Release(ctx, r.Node, vol.ID); err != nil {
					return fmt.Errorf("volume %s is held by node %s: %w", vol.Name, r.Node, err)
				}
				continue
			}
			if r.Version == 0 {
				return fmt.Errorf("%w: volume %s's files were on node %s, which is lost, and never reached the object store", ErrVolumeLost, vol.Name, r.Node)
			}
			// Taken from its last published version: what the lost node wrote since is lost.
		}
		if err := v.db.MoveVolume(ctx, vol.ID, r.Node, v.node, r.Version, r.UsedBytes); errors.Is(err, store.ErrConflict) {
			continue
		} else if err != nil {
			return fmt.Errorf("hold volume %s: %w", vol.Name, err)
		}
		vol.Node = v.node
		begun := time.Now()
		fetched, err := v.fetch(ctx, vol)
		if err != nil {
			// Let go again: the object store's version is still the current one.
			_ = v.db.MoveVolume(context.WithoutCancel(ctx), vol.ID, v.node, "", r.Version, r.UsedBytes)
			vol.Node = ""
			return fmt.Errorf("fetch volume %s: %w", vol.Name, err)
		}
		if fetched {
			telemetry.Logger(ctx).Info("volume fetched from the object store", telemetry.KeyVolumeID, vol.ID, telemetry.KeyVolumeName, vol.Name,
				telemetry.KeyNodeOther, r.Node, telemetry.KeyDurationMS, time.Since(begun).Milliseconds())
		}
		return v.Mount(vol)
	}
	return fmt.Errorf("%w: volume %s changes hands between nodes: try again", ErrVolumeBusy, vol.Name)
}

// fetch makes this node's copy of vol the object store's version vol.Version, unless it is
// already (then it says false).
func (v *Volumes) fetch(ctx context.Context, vol *Volume) (bool, error) {
	if v.localVersion(vol.ID) == vol.Version {
		return false, nil // this node published (or fetched) that version last: its copy is it
	}
	home := filepath.Join(v.dir, vol.ID)
	if err := runtime.UnmountDisk(filepath.Join(home, "data")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, err
	}
	fresh := vol.ID + ".fetched"
	_ = os.RemoveAll(filepath.Join(v.dir, fresh))
	if err := blob.GetTree(ctx, v.objects, imageKey(vol.ID, vol.Version), v.dir, fresh); err != nil {
		return false, err
	}
	if err := os.RemoveAll(home); err != nil {
		return false, err
	}
	if err := os.Rename(filepath.Join(v.dir, fresh), home); err != nil {
		return false, err
	}
	return true, v.setLocalVersion(vol.ID, vol.Version)
}

// Release publishes volume id to the object store and lets go of it, when this node holds
// it and no live sandbox here mounts it (alive says): ErrVolumeInUse, naming the sandbox,
// otherwise. A volume another node holds, or none, is left as it is. On one box it does
// nothing: a volume stays where it is.
func (v *Volumes) Release(ctx context.Context, id string, alive func(sandboxID string) bool) error {
	if v.objects == nil {
		return nil
	}
	unlock := v.lock(id)
	defer unlock()
	r, err := v.db.GetVolume(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil // deleted: nothing to publish
	}
	if err != nil {
		return fmt.Errorf("release volume %s: %w", id, err)
	}
	if r.Node != v.node {
		return nil
	}
	vol := fromVolumeRecord(r)
	// The leases stay, those of sandboxes alive says are not included: a sandbox that moves
	// keeps its lease, and mounts the volume again where it goes.
	for sid := range v.leases(id) {
		if alive(sid) {
			return fmt.Errorf("%w: volume %s is mounted in sandbox %s on node %s", ErrVolumeInUse, vol.Name, sid, v.node)
		}
	}
	used, err := v.Usage(vol)
	if err != nil {
		return err
	}
	if err := v.unmount(vol); err != nil {
		return err
	}
	ver, err := v.publish(ctx, vol)
	if err != nil {
		_ = v.Mount(vol) // held here still, as it was
		return err
	}
	if err := v.db.MoveVolume(ctx, id, v.node, "", ver, used); err != nil {
		_ = v.Mount(vol)
		return fmt.Errorf("release volume %s: %w", vol.Name, err)
	}
	if ver != r.Version && r.Version > 0 {
		_ = v.objects.Delete(ctx, imageKey(id, r.Version)) // superseded
	}
	return nil
}

// unmount unmounts vol's image and waits until no loop device is backed by it any more (a
// sandbox torn down a moment ago may still hold it): only then is the file a consistent
// copy of its filesystem.
func (v *Volumes) unmount(vol *Volume) error {
	if vol.SizeBytes == 0 {
		return nil
	}
	if err := runtime.UnmountDisk(v.DataDir(vol.ID)); err != nil {
		return err
	}
	for deadline := time.Now().Add(10 * time.Second); runtime.DiskAttached(v.image(vol.ID)); {
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: volume %s's image is still in use on node %s after its unmount", ErrVolumeInUse, vol.Name, v.node)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// publish uploads vol's files (unmounted) as its next version and returns it. Every hold
// mounts the image, and a mount alone writes to an ext4 image (its superblock): a held
// volume is always uploaded again, never taken for unchanged.
func (v *Volumes) publish(ctx context.Context, vol *Volume) (int64, error) {
	ver := vol.Version + 1
	key := imageKey(vol.ID, ver)
	if err := blob.PutSparseTree(ctx, v.objects, key, filepath.Join(v.dir, vol.ID), "./"+publishedName); err != nil {
		return 0, fmt.Errorf("publish volume %s: %w", vol.Name, err)
	}
	if err := v.setLocalVersion(vol.ID, ver); err != nil {
		_ = v.objects.Delete(ctx, key)
		return 0, fmt.Errorf("publish volume %s: %w", vol.Name, err)
	}
	return ver, nil
}

// forgetImages deletes a deleted volume's images from the object store.
func (v *Volumes) forgetImages(id string) {
	if v.objects == nil {
		return
	}
	ctx := context.Background()
	all, err := v.objects.List(ctx, "volumes/"+id+"/")
	if err != nil {
		return // left behind: space, never a wrong volume (its id is never used again)
	}
	for _, b := range all {
		_ = v.objects.Delete(ctx, b.Key)
	}
}
