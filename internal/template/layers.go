package template

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/internal/runtime"
	"github.com/cove-dev/cove/internal/store"
)

// A template built in steps is a list of layers on a root template (a full rootfs such as
// base): each RUN, COPY or WORKDIR step is one layer, an overlay upper directory holding only
// what the step changed (deletions as overlay whiteouts). Sandboxes mount the layers as lower
// directories above the root's rootfs, so a template costs the disk its steps changed.
//
// A layer is named by its key: the sha256 of the layer below (or the root's identity), the
// step's text, the configuration it ran with (env, user, workdir) and the content of the files
// it copies. A build whose step has a key that exists reuses the layer (a cache hit); layers
// are shared by every template whose steps agree up to there. Removing a template deletes the
// layers no other template uses.
//
// Layers live in <store>/.layers/<key>/{diff,meta.json}, their records in the store
// (store.Templates); a layer is built in <store>/.layers/.build-<key>-* and renamed into place
// complete, like a template, then recorded. Its meta.json is its manifest, written once, from
// which a layer without a record is adopted (records.go). (Stores kept layers in
// <store>/layers before, a name a template could take: OpenAt moves them.)

// maxLayers bounds a template's layers: the overlay mount options take one page, and every
// layer adds one lower directory path to them.
const maxLayers = 40

// Layer is one built step: what it changed, and what it was built from.
type Layer struct {
	Key       string    `json:"key"`
	Parent    string    `json:"parent"` // the key below, or the root's identity
	Step      string    `json:"step"`
	SizeBytes int64     `json:"size_bytes"`
	CreatedAt time.Time `json:"created_at"`
	BuildTime float64   `json:"build_seconds"`
}

func (s *Store) layersDir() string          { return filepath.Join(s.dir, layersDir) }
func (s *Store) layerDir(key string) string { return filepath.Join(s.layersDir(), key) }

// LayerDiff is the directory holding what the layer key changed.
func (s *Store) LayerDiff(key string) string { return filepath.Join(s.layerDir(key), "diff") }

// readLayer returns the record of the layer key.
func (s *Store) readLayer(key string) (*Layer, error) {
	r, err := s.records.GetTemplateLayer(context.Background(), key)
	if err != nil {
		return nil, err
	}
	var l Layer
	if err := json.Unmarshal(r.Record, &l); err != nil {
		return nil, fmt.Errorf("layer %s: its record: %w", key, err)
	}
	return &l, nil
}

// haveLayer reports whether the layer key is recorded and its files are here, fetching them
// from the object store when only the record is (another node built it).
func (s *Store) haveLayer(ctx context.Context, key string) bool {
	if _, err := s.readLayer(key); err != nil {
		// A complete layer without a record (a crash between its rename and its record):
		// recorded now.
		l, merr := s.layerManifest(key)
		return merr == nil && l.Key == key && exists(s.LayerDiff(key)) && s.putLayer(ctx, l) == nil
	}
	if exists(s.LayerDiff(key)) {
		return true
	}
	return s.replica != nil && s.fetchLayer(ctx, key) == nil
}

// layerManifest reads the meta.json of the layer key's directory.
func (s *Store) layerManifest(key string) (*Layer, error) {
	b, err := os.ReadFile(filepath.Join(s.layerDir(key), "meta.json"))
	if err != nil {
		return nil, err
	}
	var l Layer
	if err := json.Unmarshal(b, &l); err != nil {
		return nil, fmt.Errorf("layer %s: %w", key, err)
	}
	return &l, nil
}

// rootIdentity names a full-rootfs template for layer keys: a rebuilt root changes it.
func rootIdentity(t *Template) string {
	return "root:" + t.Name + ":" + t.Key + ":" + t.CreatedAt.UTC().Format(time.RFC3339Nano)
}

// buildContext is what a step runs with: the configuration the steps before it set.
type buildContext struct {
	Env     map[string]string
	User    string
	Workdir string
	Scope   string // whose uploads a COPY reads (see Spec.Scope)
}

// layerKey is the cache key of step over parent, in context c, with the copied files' hash.
// A forced step gets a fresh key, so it and every step above it build anew.
func layerKey(parent string, st Step, c buildContext) string {
	h := sha256.New()
	fmt.Fprintf(h, "cove-layer-v1\x00%s\x00%s\x00", parent, st.Kind)
	for _, a := range st.Args {
		fmt.Fprintf(h, "%d:%s\x00", len(a), a)
	}
	fmt.Fprintf(h, "files:%s\x00user:%s\x00workdir:%s\x00", st.FilesHash, c.User, c.Workdir)
	if st.Kind == StepCopy {
		fmt.Fprintf(h, "scope:%s\x00", c.Scope)
	}
	keys := make([]string, 0, len(c.Env))
	for k := range c.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(h, "env:%s=%s\x00", k, c.Env[k])
	}
	if st.Force {
		fmt.Fprintf(h, "force:%s", randomSuffix()+randomSuffix())
	}
	return hex.EncodeToString(h.Sum(nil))[:32]
}

// stepRun is how one layer is made: it gets the merged view of the layers below plus the new
// layer's (empty) upper directory mounted at merged, and changes files there.
type stepRun func(ctx context.Context, merged string) error

// buildLayer makes the layer key on top of lowers (topmost first, the root's rootfs last)
// unless it exists. It reports whether the layer was already there.
//
// With a disk size the step writes into a disk of its own of that many bytes, as a
// disk-limited sandbox does (runtime.NewDisk): a write past it gets ENOSPC and fails the
// step, and the host's disk gives the step no more. The layer is copied off that disk when
// the step succeeds.
func (s *Store) buildLayer(ctx context.Context, key, parent, text string, lowers []string, sd stepDisk, run stepRun) (cached bool, err error) {
	disk := sd.size
	if s.haveLayer(ctx, key) {
		return true, nil
	}
	start := time.Now()
	if err := os.MkdirAll(s.layersDir(), 0o700); err != nil {
		return false, err
	}
	work, err := os.MkdirTemp(s.layersDir(), ".build-"+key+"-")
	if err != nil {
		return false, err
	}
	unlock, err := lockDir(work)
	if err != nil {
		os.RemoveAll(work)
		return false, err
	}
	defer unlock()
	defer func() {
		if err != nil {
			if rerr := removeTree(work); rerr != nil {
				err = errors.Join(err, rerr)
			}
		}
	}()
	diff, merged := filepath.Join(work, "diff"), filepath.Join(work, "merged")
	upper := work // where the step's diff and overlay work dir are while it runs
	if disk > 0 {
		upper = filepath.Join(work, "disk")
		if err := mountStepDisk(cmp.Or(sd.images, s.layersDir()), work, upper, disk); err != nil {
			return false, err
		}
		defer runtime.UnmountDisk(upper) // before the deferred removal of work on failure
	}
	runDiff := filepath.Join(upper, "diff")
	wdir := filepath.Join(upper, "work")
	for _, d := range []string{runDiff, wdir, merged} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return false, err
		}
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", strings.Join(lowers, ":"), runDiff, wdir)
	if len(opts) >= os.Getpagesize() {
		return false, fmt.Errorf("%w: too many layers for one overlay mount", ErrInvalid)
	}
	if err := unix.Mount("overlay", merged, "overlay", unix.MS_NODEV, opts); err != nil {
		return false, fmt.Errorf("mount build overlay: %w", err)
	}
	runErr := run(ctx, merged)
	if err := unix.Unmount(merged, 0); err != nil {
		if uerr := unix.Unmount(merged, unix.MNT_DETACH); uerr != nil {
			return false, errors.Join(runErr, fmt.Errorf("unmount build overlay: %w", err))
		}
	}
	if runErr != nil {
		if disk > 0 && diskFull(upper) {
			runErr = diskFullError(runErr, disk)
		}
		return false, runErr
	}
	for _, d := range []string{wdir, merged} {
		if err := os.RemoveAll(d); err != nil {
			return false, err
		}
	}
	if disk > 0 {
		if out, err := exec.CommandContext(ctx, "cp", "-a", "--", runDiff, diff).CombinedOutput(); err != nil {
			return false, fmt.Errorf("copy layer off the step's disk: %w: %s", err, bytes.TrimSpace(out))
		}
		if err := runtime.UnmountDisk(upper); err != nil {
			return false, err
		}
		for _, p := range []string{upper, filepath.Join(work, "disk.img")} {
			if err := os.Remove(p); err != nil {
				return false, err
			}
		}
	}
	l := Layer{Key: key, Parent: parent, Step: text, SizeBytes: diskUsage(diff), CreatedAt: time.Now().UTC(),
		BuildTime: time.Since(start).Seconds()}
	b, _ := json.MarshalIndent(l, "", "  ")
	if err := os.WriteFile(filepath.Join(work, "meta.json"), append(b, '\n'), 0o644); err != nil {
		return false, err
	}
	if err := os.Rename(work, s.layerDir(key)); err != nil {
		if _, rerr := s.layerManifest(key); rerr == nil {
			cached = true // a concurrent build made the same layer first
			if err := removeTree(work); err != nil {
				return true, err
			}
		} else if rerr := os.RemoveAll(s.layerDir(key)); rerr == nil && os.Rename(work, s.layerDir(key)) == nil {
			// files of a layer that lost its record (gone with the templates using it while
			// this node kept a copy): replaced by the new build's
		} else {
			return false, fmt.Errorf("publish layer %s: %w", key, err)
		}
	}
	if err := s.putLayer(ctx, &l); err != nil && !errors.Is(err, store.ErrConflict) {
		return cached, fmt.Errorf("record layer %s: %w", key, err)
	}
	return cached, nil
}

// stepDisk is the disk a step writes into: size bytes (0: the store's disk, unbounded), its
// formatted image kept in images.
type stepDisk struct {
	size   int64
	images string
}

// mountStepDisk mounts at mnt a new disk of size bytes, its image in work (the pristine
// image of each size kept in imageDir).
func mountStepDisk(imageDir, work, mnt string, size int64) error {
	img := filepath.Join(work, "disk.img")
	if err := runtime.NewDisk(imageDir, img, size); err != nil {
		return fmt.Errorf("build step disk: %w", err)
	}
	if err := os.Mkdir(mnt, 0o755); err != nil {
		return err
	}
	if err := runtime.MountDisk(img, mnt); err != nil {
		return fmt.Errorf("build step disk: %w", err)
	}
	return nil
}

// diskFull reports whether the filesystem of dir has (about) no room left.
func diskFull(dir string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return false
	}
	return st.Bavail*uint64(st.Bsize) < 1<<20 || st.Ffree == 0
}

// diskFullError says that a failed step filled its disk, in the failure's last lines.
func diskFullError(err error, disk int64) error {
	line := fmt.Sprintf("==> ENOSPC: the step filled the build's disk (%d MB): its writes past that size failed", disk>>20)
	var ee *ExitError
	if errors.As(err, &ee) {
		ee.Tail = append(ee.Tail, line)
		return err
	}
	return fmt.Errorf("%w (%s)", err, strings.TrimPrefix(line, "==> "))
}

// diskUsage is the disk space the files under dir take (allocated blocks, each inode once).
func diskUsage(dir string) int64 {
	var n int64
	seen := map[uint64]bool{}
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return nil
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return nil
		}
		if st.Nlink > 1 && !fi.IsDir() {
			if seen[st.Ino] {
				return nil
			}
			seen[st.Ino] = true
		}
		n += st.Blocks * 512
		return nil
	})
	return n
}

// gcLayers deletes every layer no template references. It skips the sweep when a build holds
// the layers lock (a build in progress references layers no template lists yet).
func (s *Store) gcLayers() (freed int64, err error) {
	if err := os.MkdirAll(s.layersDir(), 0o700); err != nil {
		return 0, err
	}
	release, ok := abandoned(s.layersDir())
	if !ok {
		return 0, nil
	}
	defer release()
	used, err := s.taggedLayers()
	if err != nil {
		return 0, err
	}
	for k := range mountedLayers() {
		used[k] = true // a running sandbox's root stacks it
	}
	all, err := s.List()
	if err != nil {
		return 0, err
	}
	for _, t := range all {
		for _, k := range t.Layers {
			used[k] = true
		}
	}
	entries, err := os.ReadDir(s.layersDir())
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") || used[e.Name()] {
			continue
		}
		if l, err := s.layerManifest(e.Name()); err == nil {
			freed += l.SizeBytes
		}
		// The record first: a crash after it leaves files the next build of the key replaces.
		if err := s.records.DeleteTemplateLayer(context.Background(), e.Name()); err != nil && !errors.Is(err, store.ErrNotFound) {
			return freed, fmt.Errorf("remove layer %s: %w", e.Name(), err)
		}
		if err := removeTree(s.layerDir(e.Name())); err != nil {
			return freed, fmt.Errorf("remove layer %s: %w", e.Name(), err)
		}
	}
	return freed, nil
}

// mountedLayers are the keys of the layers some overlay on this host stacks as a lower dir
// (a sandbox, or a build, running on them): read from the lowerdir options in mountinfo.
func mountedLayers() map[string]bool {
	keys := map[string]bool{}
	for dir := range mountedLowers() {
		if d := filepath.Base(filepath.Dir(filepath.Dir(dir))); filepath.Base(dir) == "diff" && (d == layersDir || d == legacyLayersDir) {
			keys[filepath.Base(filepath.Dir(dir))] = true
		}
	}
	return keys
}

// mountedLowers are the lower dirs of every overlay on this host: those mountinfo names and
// those the runtime recorded for the overlays it names by descriptor.
func mountedLowers() map[string]bool { return runtime.MountedLowers() }

// holdLayers keeps gcLayers off while a build runs: a shared lock on the layers directory.
func (s *Store) holdLayers() (release func(), err error) {
	if err := os.MkdirAll(s.layersDir(), 0o700); err != nil {
		return nil, err
	}
	f, err := os.Open(s.layersDir())
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}

// Usage is how much disk a template takes: Own is what only it uses (its layers no other
// template shares, or its whole rootfs when it is a root), Shared what it uses in common with
// others (shared layers and its root's rootfs).
type Usage struct {
	Own    int64 `json:"own_bytes"`
	Shared int64 `json:"shared_bytes"`
}

// Usage returns each template's disk usage, by name.
func (s *Store) Usage() (map[string]Usage, error) {
	all, err := s.List()
	if err != nil {
		return nil, err
	}
	refs := map[string]int{}
	roots := map[string]int64{}
	for _, t := range all {
		for _, k := range t.Layers {
			refs[k]++
		}
		if t.Root == "" {
			roots[t.Name] = t.SizeBytes
		}
	}
	out := map[string]Usage{}
	for _, t := range all {
		var u Usage
		if t.Root == "" {
			u.Own = t.SizeBytes
		} else {
			u.Shared = roots[t.Root]
		}
		for _, k := range t.Layers {
			l, err := s.readLayer(k)
			if err != nil {
				continue
			}
			if refs[k] > 1 {
				u.Shared += l.SizeBytes
			} else {
				u.Own += l.SizeBytes
			}
		}
		out[t.Name] = u
	}
	return out, nil
}

// lookupUser resolves "name", "name:group", "uid" or "uid:gid" in the rootfs's account files.
func lookupUser(rootfs, spec string) (uid, gid int, home string, err error) {
	if spec == "" || spec == "root" {
		return 0, 0, "/root", nil
	}
	name, group, hasGroup := strings.Cut(spec, ":")
	uid, gid, home = -1, -1, "/"
	if n, err := strconv.Atoi(name); err == nil {
		uid, gid = n, n
	}
	if err := scanColon(filepath.Join(rootfs, "etc/passwd"), func(f []string) bool {
		if len(f) >= 6 && (f[0] == name || f[2] == name) {
			uid, _ = strconv.Atoi(f[2])
			gid, _ = strconv.Atoi(f[3])
			home = f[5]
			return true
		}
		return false
	}); err != nil && uid < 0 {
		return 0, 0, "", err
	}
	if uid < 0 {
		return 0, 0, "", fmt.Errorf("%w: user %q does not exist in the template", ErrInvalid, name)
	}
	if hasGroup {
		gid = -1
		if n, err := strconv.Atoi(group); err == nil {
			gid = n
		}
		_ = scanColon(filepath.Join(rootfs, "etc/group"), func(f []string) bool {
			if len(f) >= 3 && f[0] == group {
				gid, _ = strconv.Atoi(f[2])
				return true
			}
			return false
		})
		if gid < 0 {
			return 0, 0, "", fmt.Errorf("%w: group %q does not exist in the template", ErrInvalid, group)
		}
	}
	return uid, gid, home, nil
}

func scanColon(file string, match func([]string) bool) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if match(strings.Split(sc.Text(), ":")) {
			return nil
		}
	}
	return sc.Err()
}

// tailLines keeps the last n lines written through it (a failing step's error shows them).
type tailLines struct {
	n     int
	lines []string
}

func (t *tailLines) add(s string) {
	t.lines = append(t.lines, s)
	if len(t.lines) > t.n {
		t.lines = t.lines[len(t.lines)-t.n:]
	}
}

// Link makes the ready template name of the store in dir usable in the store in own without a
// copy: own gets symlinks to its tree, to the root it is built on and to its layers (a test's
// or benchmark's own store on a shared base this way never writes to the shared one). A
// store opened on own adopts them (records.go): their manifests make their records.
func Link(own, dir, name string) error {
	if err := os.MkdirAll(own, 0o700); err != nil {
		return fmt.Errorf("link template %s: %w", name, err)
	}
	s := &Store{dir: own}
	t, err := readMeta(filepath.Join(dir, name))
	if err != nil {
		return fmt.Errorf("link template %s from %s: %w", name, dir, err)
	}
	links := []string{name}
	if t.Root != "" {
		links = append(links, t.Root)
	}
	for _, k := range t.Layers {
		links = append(links, filepath.Join(layersDir, k))
	}
	if err := os.MkdirAll(s.layersDir(), 0o700); err != nil {
		return err
	}
	for _, l := range links {
		src := filepath.Join(dir, l)
		if legacy := filepath.Join(dir, legacyLayersDir, filepath.Base(l)); filepath.Dir(l) == layersDir && !exists(src) && exists(legacy) {
			src = legacy // a store no cove of this version has opened yet
		}
		if err := os.Symlink(src, filepath.Join(s.dir, l)); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("link template %s: %w", name, err)
		}
	}
	return nil
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}
