package snapshot

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/internal/blob"
	"github.com/cove-dev/cove/internal/sandbox/runtime"
	"github.com/cove-dev/cove/internal/store"
)

// Volume is a named, persistent directory of a team that outlives sandboxes: mounted into
// one at create (volumeMounts), kept when the sandbox is gone. Its JSON shape is the one
// volume.json had, which OpenVolumes moves into the store.
type Volume struct {
	ID        string    `json:"volumeID"`
	Name      string    `json:"name"`
	TeamID    string    `json:"teamId"`
	Token     string    `json:"token"` // for E2B's volume content API
	CreatedAt time.Time `json:"createdAt"`
	// SizeBytes is the volume's quota: its files live in an ext4 image of this size, so a
	// write past it gets ENOSPC. 0 (volumes made before quotas) is a plain directory.
	SizeBytes int64 `json:"sizeBytes,omitempty"`
	// Node holds its live files ("" in a cluster: none, its image in the object store at
	// Version is current); UsedBytes is what its files took when it was last published.
	Node               string `json:"-"`
	Version, UsedBytes int64  `json:"-"`
}

// Errors of the volume store.
var (
	ErrVolumeNotFound = errors.New("volume not found")
	ErrVolumeExists   = errors.New("a volume with that name exists")
	ErrVolumeName     = errors.New("bad volume name")
	ErrVolumeSize     = errors.New("bad volume size")
	// ErrVolumeQuota: the team holds as many volumes, or as many bytes of them, as its
	// VolumeLimits allow.
	ErrVolumeQuota = errors.New("team volume quota reached")
	// ErrVolumeNoSpace: the host's disk cannot hold the volume above its free-space floor.
	ErrVolumeNoSpace = errors.New("the volume does not fit on the host's disk")
)

// VolumeLimits bounds the volumes Create makes; zero fields mean no limit.
type VolumeLimits struct {
	Count int   // volumes a team may hold
	Bytes int64 // their sizes in all
	// FreeFloor is the free space the volumes' disk keeps: a new volume's size must fit in
	// what is free above it once every sized volume could be filled (images are sparse,
	// so a volume's unwritten bytes are owed to it, not free).
	FreeFloor int64
}

// MaxVolumeBytes bounds a volume's size (1 TiB); its image is sparse, so only what is
// written costs the host's disk.
const MaxVolumeBytes = 1 << 40

// minVolumeBytes is the smallest ext4 image worth making.
const minVolumeBytes = 1 << 20

// Volumes is one node's volumes: their files under one directory, <dir>/<id>/data, where a
// volume with a size mounts its <dir>/<id>/volume.img; their records and leases in a store.
//
// Its methods keep the signatures the orchestrator calls them by (no context): a record is
// one local query, and the callers' contexts are theirs to thread through later.
type Volumes struct {
	dir  string
	db   store.Volumes
	node string
	mu   sync.Mutex // serialises create, claim and delete, so names stay unique per team
	// objects and peers are set on a node of a cluster (Share): a volume's image goes
	// through the object store from the node that releases it to the next that mounts it.
	objects blob.Store
	peers   VolumePeers
	locks   sync.Map // volume id → *sync.Mutex: one hand-off, mount or publish of it at a time
}

// OpenVolumes returns node's volume store in dir, making it, with every sized volume
// mounted: a paused sandbox restored after a reboot binds its volumes where they must be,
// never the empty directory beneath. Records and leases an older release left as files
// (volume.json, mounts/<sandbox id>) are moved into db first.
func OpenVolumes(ctx context.Context, dir string, db store.Volumes, node string) (*Volumes, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("volumes: %w", err)
	}
	v := &Volumes{dir: dir, db: db, node: node}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("volumes: %w", err)
	}
	for _, e := range entries {
		if volumeID.MatchString(e.Name()) {
			if err := v.moveLegacy(ctx, e.Name()); err != nil {
				return nil, err
			}
		}
	}
	all, err := db.ListVolumes(ctx, node, "")
	if err != nil {
		return nil, fmt.Errorf("volumes: %w", err)
	}
	for _, vol := range all {
		if err := v.Mount(fromVolumeRecord(vol)); err != nil {
			return nil, fmt.Errorf("volumes: %w (its image is %s)", err, v.image(vol.ID))
		}
	}
	return v, nil
}

// moveLegacy moves volume id's volume.json and lease files into the store, then removes
// them: the leases first, the record's file last, so a start cut short anywhere moves the
// rest at the next (a record or lease already there is only replaced by the same).
func (v *Volumes) moveLegacy(ctx context.Context, id string) error {
	path := filepath.Join(v.dir, id, "volume.json")
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil // half made or half deleted (no record), or moved already
	}
	if err != nil {
		return fmt.Errorf("volumes: %w", err)
	}
	if _, err := v.db.GetVolume(ctx, id); errors.Is(err, store.ErrNotFound) {
		var vol Volume
		if err := json.Unmarshal(b, &vol); err != nil || vol.ID != id {
			return fmt.Errorf("volumes: %s does not read as volume %s's record (%v): move it away to start", path, id, err)
		}
		if err := v.db.InsertVolume(ctx, v.toRecord(&vol)); err != nil {
			return fmt.Errorf("volumes: move %s into the store: %w", path, err)
		}
	} else if err != nil {
		return fmt.Errorf("volumes: %w", err)
	}
	leases := filepath.Join(v.dir, id, "mounts")
	entries, _ := os.ReadDir(leases)
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(leases, e.Name()))
		if err != nil {
			return fmt.Errorf("volumes: %w", err)
		}
		var l lease
		if json.Unmarshal(b, &l) != nil {
			l = lease{ReadOnly: string(b) == "ro"} // the first leases were the bare mode
		}
		if err := v.db.PutVolumeLease(ctx, &store.VolumeLease{VolumeID: id, SandboxID: e.Name(), ReadOnly: l.ReadOnly, Paths: l.Paths}); err != nil {
			return fmt.Errorf("volumes: move lease %s into the store: %w", e.Name(), err)
		}
		if err := os.Remove(filepath.Join(leases, e.Name())); err != nil {
			return fmt.Errorf("volumes: %w", err)
		}
	}
	if err := os.RemoveAll(leases); err != nil {
		return fmt.Errorf("volumes: %w", err)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("volumes: remove %s after moving it into the store: %w", path, err)
	}
	return nil
}

func (v *Volumes) toRecord(vol *Volume) *store.Volume {
	return &store.Volume{ID: vol.ID, Node: v.node, TeamID: vol.TeamID, Name: vol.Name, Token: vol.Token, CreatedAt: vol.CreatedAt, SizeBytes: vol.SizeBytes}
}

func fromVolumeRecord(r *store.Volume) *Volume {
	return &Volume{ID: r.ID, Name: r.Name, TeamID: r.TeamID, Token: r.Token, CreatedAt: r.CreatedAt, SizeBytes: r.SizeBytes,
		Node: r.Node, Version: r.Version, UsedBytes: r.UsedBytes}
}

// Mount makes vol's files reachable at DataDir: a sized volume's image is loop-mounted there
// unless it is already (a mount outlives the server that made it).
func (v *Volumes) Mount(vol *Volume) error {
	if vol.SizeBytes == 0 {
		return nil
	}
	if err := runtime.MountDisk(v.image(vol.ID), v.DataDir(vol.ID)); err != nil {
		return fmt.Errorf("mount volume %s: %w", vol.Name, err)
	}
	return nil
}

func (v *Volumes) image(id string) string { return filepath.Join(v.dir, id, "volume.img") }

// Usage returns the bytes vol's files take; a volume without a size reports 0. In a
// cluster, a volume this node does not hold reports what it took when last published: a
// listing fetches no image.
func (v *Volumes) Usage(vol *Volume) (int64, error) {
	if vol.SizeBytes == 0 {
		return 0, nil
	}
	if v.objects != nil && vol.Node != v.node {
		return vol.UsedBytes, nil
	}
	if err := v.Mount(vol); err != nil {
		return 0, err
	}
	var st unix.Statfs_t
	if err := unix.Statfs(v.DataDir(vol.ID), &st); err != nil {
		return 0, fmt.Errorf("volume %s usage: %w", vol.Name, err)
	}
	return int64(st.Blocks-st.Bfree) * st.Bsize, nil
}

var (
	volumeID   = regexp.MustCompile(`^vol-[0-9a-f]{16}$`)
	volumeName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)
)

// DataDir is the directory sandboxes see of volume id.
func (v *Volumes) DataDir(id string) string { return filepath.Join(v.dir, id, "data") }

// Create makes a team's volume named name, of size bytes (0: a plain directory, no quota),
// within lim.
func (v *Volumes) Create(teamID, name string, size int64, lim VolumeLimits) (_ *Volume, err error) {
	if !volumeName.MatchString(name) {
		return nil, fmt.Errorf("%w: %q must be 1-63 of [A-Za-z0-9._-] starting with a letter or digit", ErrVolumeName, name)
	}
	if size != 0 && (size < minVolumeBytes || size > MaxVolumeBytes) {
		return nil, fmt.Errorf("%w: %d bytes: want 1 MiB to 1 TiB", ErrVolumeSize, size)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, err := v.byName(teamID, name); err == nil {
		return nil, fmt.Errorf("%w: %s", ErrVolumeExists, name)
	}
	if err := v.fits(teamID, size, lim); err != nil {
		return nil, err
	}
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	vol := &Volume{ID: "vol-" + hex.EncodeToString(b[:8]), Name: name, TeamID: teamID, Token: hex.EncodeToString(b[8:]), CreatedAt: time.Now().UTC(), SizeBytes: size}
	if err := os.MkdirAll(v.DataDir(vol.ID), 0o777); err != nil {
		return nil, fmt.Errorf("create volume %s: %w", name, err)
	}
	defer func() {
		if err != nil { // nothing half made stays
			_ = runtime.UnmountDisk(v.DataDir(vol.ID))
			_ = os.RemoveAll(filepath.Join(v.dir, vol.ID))
		}
	}()
	if size > 0 {
		if err := runtime.NewDisk(v.dir, v.image(vol.ID), size); err != nil {
			return nil, fmt.Errorf("create volume %s: %w", name, err)
		}
		if err := v.Mount(vol); err != nil {
			return nil, err
		}
		// mke2fs's lost+found is no file of the user's; e2fsck makes it again if it must.
		_ = os.Remove(filepath.Join(v.DataDir(vol.ID), "lost+found"))
	}
	// Sandboxes run commands as uid 1000 by default: the volume is theirs to write.
	if err := os.Chmod(v.DataDir(vol.ID), 0o777|os.ModeSticky); err != nil {
		return nil, fmt.Errorf("create volume %s: %w", name, err)
	}
	// The record last: the volume exists once its files are ready.
	if err := v.db.InsertVolume(context.Background(), v.toRecord(vol)); errors.Is(err, store.ErrConflict) {
		return nil, fmt.Errorf("%w: %s", ErrVolumeExists, name)
	} else if err != nil {
		return nil, fmt.Errorf("create volume %s: %w", name, err)
	}
	return vol, nil
}

// fits checks a new volume of size bytes of team against lim. v.mu is held, so two creates
// cannot both take the last room.
func (v *Volumes) fits(teamID string, size int64, lim VolumeLimits) error {
	all, err := v.db.ListVolumes(context.Background(), v.listNode(), "")
	if err != nil {
		return fmt.Errorf("volumes: %w", err)
	}
	count, bytes, owed := 1, size, int64(0)
	for _, vol := range all {
		if vol.TeamID == teamID {
			count, bytes = count+1, bytes+vol.SizeBytes
		}
		if vol.SizeBytes > 0 && vol.Node == v.node { // the images on this node's disk
			var st unix.Stat_t
			if unix.Stat(v.image(vol.ID), &st) == nil {
				owed += max(0, vol.SizeBytes-st.Blocks*512)
			}
		}
	}
	switch {
	case lim.Count > 0 && count > lim.Count:
		return fmt.Errorf("%w: this would be volume %d of the team's %d", ErrVolumeQuota, count, lim.Count)
	case lim.Bytes > 0 && bytes > lim.Bytes:
		return fmt.Errorf("%w: its volumes would hold %d MiB, over the team's %d MiB", ErrVolumeQuota, bytes>>20, lim.Bytes>>20)
	}
	if lim.FreeFloor > 0 && size > 0 {
		var st unix.Statfs_t
		if err := unix.Statfs(v.dir, &st); err != nil {
			return fmt.Errorf("volumes: free space: %w", err)
		}
		if room := int64(st.Bavail)*st.Bsize - owed - lim.FreeFloor; size > room {
			return fmt.Errorf("%w: %d MiB asked, %d MiB free once the other volumes are filled and the host keeps its %d MiB floor",
				ErrVolumeNoSpace, size>>20, max(0, room)>>20, lim.FreeFloor>>20)
		}
	}
	return nil
}

// Get returns a team's volume by id or name.
func (v *Volumes) Get(teamID, idOrName string) (*Volume, error) {
	if volumeID.MatchString(idOrName) {
		vol, err := v.read(idOrName)
		if err != nil || vol.TeamID != teamID {
			return nil, fmt.Errorf("%w: %s", ErrVolumeNotFound, idOrName)
		}
		return vol, nil
	}
	return v.byName(teamID, idOrName)
}

// ByID returns a volume by id, of whichever team.
func (v *Volumes) ByID(id string) (*Volume, error) {
	if !volumeID.MatchString(id) {
		return nil, fmt.Errorf("%w: %s", ErrVolumeNotFound, id)
	}
	return v.read(id)
}

// read returns volume id if its files are on this node; in a cluster, wherever they are.
func (v *Volumes) read(id string) (*Volume, error) {
	r, err := v.db.GetVolume(context.Background(), id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && r.Node != v.node && v.objects == nil) {
		return nil, fmt.Errorf("%w: %s", ErrVolumeNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("volume %s: %w", id, err)
	}
	return fromVolumeRecord(r), nil
}

func (v *Volumes) byName(teamID, name string) (*Volume, error) {
	all, err := v.List(teamID)
	if err != nil {
		return nil, err
	}
	for _, vol := range all {
		if vol.Name == name {
			return vol, nil
		}
	}
	return nil, fmt.Errorf("%w: %s", ErrVolumeNotFound, name)
}

// List returns a team's volumes on this node (in a cluster, on every node), oldest first.
func (v *Volumes) List(teamID string) ([]*Volume, error) {
	if teamID == "" {
		return nil, nil // every volume has a team: "" is none, not all
	}
	all, err := v.db.ListVolumes(context.Background(), v.listNode(), teamID)
	if err != nil {
		return nil, fmt.Errorf("list volumes: %w", err)
	}
	var out []*Volume
	for _, r := range all {
		out = append(out, fromVolumeRecord(r))
	}
	return out, nil
}

// Delete removes a team's volume and its files; ErrVolumeInUse while a live sandbox mounts it.
func (v *Volumes) Delete(teamID, id string, alive func(sandboxID string) bool) error {
	vol, err := v.Get(teamID, id)
	if err != nil {
		return err
	}
	unlock := v.lock(vol.ID)
	defer unlock()
	v.mu.Lock()
	defer v.mu.Unlock()
	if vol, err = v.Get(teamID, vol.ID); err != nil {
		return err
	}
	if v.objects != nil && vol.Node != v.node && vol.Node != "" && v.peers.NodeAlive(context.Background(), vol.Node) {
		return fmt.Errorf("%w: volume %s is held by node %s, which deletes it", ErrVolumeInUse, vol.Name, vol.Node)
	}
	if h := v.holders(vol.ID, alive); len(h) > 0 {
		ids := make([]string, 0, len(h))
		for sid := range h {
			ids = append(ids, sid)
		}
		sort.Strings(ids)
		return fmt.Errorf("%w: volume %s is mounted in sandbox %s: kill it first", ErrVolumeInUse, vol.Name, strings.Join(ids, ", "))
	}
	// The record first (its leases with it): a delete cut short leaves files no record
	// names, never a listed volume without them.
	if err := v.db.DeleteVolume(context.Background(), vol.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("delete volume %s: %w", vol.Name, err)
	}
	if err := runtime.UnmountDisk(v.DataDir(vol.ID)); err != nil {
		return fmt.Errorf("delete volume %s: %w", vol.Name, err)
	}
	v.forgetImages(vol.ID)
	return os.RemoveAll(filepath.Join(v.dir, vol.ID))
}

// A volume's mounts are leases, one per sandbox in the store (its mode and paths), so they
// outlive the server as its sandboxes do. A lease counts while its sandbox is alive (the
// orchestrator says); the others are swept by the next claim.

// ErrVolumeBusy: a read-write mount of a volume another live sandbox mounts read-write.
var ErrVolumeBusy = errors.New("volume is mounted read-write")

// ErrVolumeInUse: deleting a volume a live sandbox mounts.
var ErrVolumeInUse = errors.New("volume is in use")

// lease is how one sandbox mounts one volume, as an older release's lease file said.
type lease struct {
	ReadOnly bool     `json:"readOnly"`
	Paths    []string `json:"paths"`
}

// Mount is a volume mounted in a sandbox, as its lease says.
type Mount struct {
	Volume   *Volume
	Path     string
	ReadOnly bool
}

// leases returns volume id's leases by sandbox id; none when the store cannot say.
func (v *Volumes) leases(id string) map[string]*store.VolumeLease {
	all, _ := v.db.VolumeLeases(context.Background(), id)
	out := make(map[string]*store.VolumeLease, len(all))
	for _, l := range all {
		out[l.SandboxID] = l
	}
	return out
}

// holders returns the live sandboxes mounting volume id, by sandbox id: true if read-write.
// It removes the leases of sandboxes no longer alive. Call with v.mu held.
func (v *Volumes) holders(id string, alive func(sandboxID string) bool) map[string]bool {
	out := map[string]bool{}
	for sid, l := range v.leases(id) {
		if !alive(sid) {
			_ = v.db.DeleteVolumeLease(context.Background(), id, sid)
			continue
		}
		out[sid] = !l.ReadOnly
	}
	return out
}

// Claim records that sandbox sandboxID mounts vol at path, read-only or not. A read-write
// mount is ErrVolumeBusy (naming the holder) while another live sandbox mounts vol
// read-write; read-only mounts are never refused.
func (v *Volumes) Claim(vol *Volume, sandboxID, path string, readOnly bool, alive func(sandboxID string) bool) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	r, err := v.read(vol.ID)
	if err != nil { // deleted meanwhile
		return err
	}
	if r.Node != v.node { // handed to another node meanwhile (Attach holds it first)
		return fmt.Errorf("%w: volume %s is held by node %q", ErrVolumeBusy, vol.Name, r.Node)
	}
	if !readOnly {
		for holder, rw := range v.holders(vol.ID, alive) {
			if rw && holder != sandboxID {
				return fmt.Errorf("%w: volume %s is mounted read-write in sandbox %s (mount it with readOnly: true, or kill that sandbox first)", ErrVolumeBusy, vol.Name, holder)
			}
		}
	}
	l := v.leases(vol.ID)[sandboxID]
	if l == nil {
		l = &store.VolumeLease{VolumeID: vol.ID, SandboxID: sandboxID, ReadOnly: true}
	}
	l.ReadOnly = l.ReadOnly && readOnly  // read-write if any of its mounts is
	if !slices.Contains(l.Paths, path) { // a moved sandbox claims its paths again
		l.Paths = append(l.Paths, path)
	}
	if err := v.db.PutVolumeLease(context.Background(), l); errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%w: %s", ErrVolumeNotFound, vol.ID) // deleted meanwhile, on another path
	} else if err != nil {
		return fmt.Errorf("claim volume %s: %w", vol.Name, err)
	}
	return nil
}

// UnmountIdle unmounts the sized volumes no live sandbox mounts (alive says), so a server
// that stops leaves no loop mount behind but those of the sandboxes that outlive it. It
// returns the ids of the volumes it unmounted; the next Mount (OpenVolumes at the next
// start, a create, the content API) mounts them again.
func (v *Volumes) UnmountIdle(alive func(sandboxID string) bool) ([]string, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	all, err := v.db.ListVolumes(context.Background(), v.node, "")
	if err != nil {
		return nil, fmt.Errorf("volumes: %w", err)
	}
	var out []string
	var errs []error
	for _, vol := range all {
		if vol.SizeBytes == 0 || len(v.holders(vol.ID, alive)) > 0 {
			continue
		}
		if mounted, err := runtime.IsMountPoint(v.DataDir(vol.ID)); err != nil || !mounted {
			continue
		}
		if err := runtime.UnmountDisk(v.DataDir(vol.ID)); err != nil {
			errs = append(errs, fmt.Errorf("volume %s: %w", vol.Name, err))
			continue
		}
		out = append(out, vol.ID)
	}
	return out, errors.Join(errs...)
}

// Holders returns the live sandboxes that mount vol, sorted.
func (v *Volumes) Holders(vol *Volume, alive func(sandboxID string) bool) []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []string
	for id := range v.holders(vol.ID, alive) {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// MountsOf returns the team's volumes sandboxID mounts, by path, as their leases say.
func (v *Volumes) MountsOf(teamID, sandboxID string) ([]Mount, error) {
	all, err := v.List(teamID)
	if err != nil {
		return nil, err
	}
	var out []Mount
	for _, vol := range all {
		l := v.leases(vol.ID)[sandboxID]
		if l == nil {
			continue
		}
		for _, p := range l.Paths {
			out = append(out, Mount{Volume: vol, Path: p, ReadOnly: l.ReadOnly})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

// IsVolumeID says whether s has the shape of a volume's id.
func IsVolumeID(s string) bool { return volumeID.MatchString(s) }
