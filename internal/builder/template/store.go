package template

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/internal/blob"
	"github.com/cove-dev/cove/internal/errdefs"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/sandbox/runtime"
	"github.com/cove-dev/cove/internal/store"
)

// Errors callers branch on.
var (
	// ErrNotFound: no ready template with that name.
	ErrNotFound = errdefs.New(errdefs.ErrNotFound, "template not found")
	// ErrExists: a template with that name is ready already; remove it first.
	ErrExists = errdefs.New(errdefs.ErrConflict, "template exists")
	// ErrInvalid: the build spec is malformed.
	ErrInvalid = errdefs.New(errdefs.ErrInvalidArgument, "invalid template spec")
	// ErrInUse: other templates are built on the template.
	ErrInUse = errdefs.New(errdefs.ErrConflict, "template in use")
	// ErrNotOwner: the template belongs to another team, or to the host (built there).
	ErrNotOwner = errdefs.New(errdefs.ErrPermissionDenied, "template belongs to another team")
)

// User is the unprivileged account every base template has, as E2B templates do.
const (
	UserName = "user"
	UserID   = 1000
	UserHome = "/home/user"
)

// Template is a ready, read-only root filesystem and what it was built from.
type Template struct {
	Name    string   `json:"name"`
	From    string   `json:"from,omitempty"`  // parent template; "" for a root (bootstrapped, imported)
	Suite   string   `json:"suite,omitempty"` // Debian suite of a bootstrapped root
	Include []string `json:"include,omitempty"`
	// Key names the definition the template was built from: the base's is its definition's
	// key (templates.BaseKey), so a base whose key differs from the running cove's was built
	// from another definition; a bootstrapped root's is its BOOTSTRAP line's Bootstrap.Key.
	Key       string    `json:"key,omitempty"`
	Run       []string  `json:"run,omitempty"` // build steps, in order
	CreatedAt time.Time `json:"created_at"`
	BuildTime float64   `json:"build_seconds"`
	SizeBytes int64     `json:"size_bytes"`
	// CollectLogs switches the collection of command output for sandboxes of this template
	// (a create request's own collectLogs wins); nil means on.
	CollectLogs *bool `json:"collect_logs,omitempty"`

	// Bootstrap is the BOOTSTRAP line a root template was debootstrapped from.
	Bootstrap *Bootstrap `json:"bootstrap,omitempty"`
	// Image is the OCI image a root template was unpacked from (reference@digest).
	Image string `json:"image,omitempty"`
	// Root is the template whose full rootfs lies below Layers; "" when this template is one.
	Root string `json:"root,omitempty"`
	// Layers are the keys of the layers the steps made, bottom first (see layers.go).
	Layers []string `json:"layers,omitempty"`
	// Steps are the steps of a template built in steps, in order.
	Steps []Step `json:"steps,omitempty"`
	// Env, User and Workdir are what the steps set: sandboxes start with them.
	Env     map[string]string `json:"env,omitempty"`
	User    string            `json:"user,omitempty"`
	Workdir string            `json:"workdir,omitempty"`
	// StartCmd runs when a sandbox starts; ReadyCmd exits 0 once it is ready.
	StartCmd string `json:"start_cmd,omitempty"`
	ReadyCmd string `json:"ready_cmd,omitempty"`
	// CPUCount and MemoryMB size the template's sandboxes; 0 means the server's default.
	CPUCount int `json:"cpu_count,omitempty"`
	MemoryMB int `json:"memory_mb,omitempty"`
	// Runtime is the engine the template's sandboxes must run on (runc, runsc); "" is the
	// server's default.
	Runtime string `json:"runtime,omitempty"`
	// BuildID is the API build that made the template ("" for builds on the host).
	BuildID string `json:"build_id,omitempty"`
	// TeamID is the team whose API build made the template: only it may rebuild, tag or
	// delete it over the API. "" for templates made on the host.
	TeamID string `json:"team_id,omitempty"`
	// Public lets every team start sandboxes from a team's template (E2B's public); a team's
	// template is its own otherwise. Templates made on the host are every team's.
	Public bool `json:"public,omitempty"`
	// Built says, step by step, what the last build did.
	Built []StepResult `json:"built,omitempty"`
	// StartSnapshot is the snapshot sandboxes start from, taken once the start command
	// passed its ready check at the end of the build (internal/builder/template/build takes it); nil
	// without one.
	StartSnapshot *StartSnapshot `json:"start_snapshot,omitempty"`

	// Rootfs is the template's root directory: a sandbox's read-only lower layer (for a
	// template built in steps, its root's rootfs).
	Rootfs string `json:"-"`
	// LayerDirs are the directories of Layers, topmost first, to stack above Rootfs.
	LayerDirs []string `json:"-"`
	// BuildLog is the file holding the build's output.
	BuildLog string `json:"-"`
}

// Store keeps templates: their records in the store (store.Templates, SQLite or a cluster's
// PostgreSQL), the authority on which templates, tags and layers exist and on everything set
// after a build (team, public, tags); their files under <data>/templates/<name>/{rootfs,
// build.log,start-snapshot}. A build happens in <data>/templates/.build-* and is renamed
// into place complete, then its record is written: a reader never sees half a template.
//
// A build also writes meta.json in its tree, once, before the rename: the tree's manifest,
// a description of its files (like an OCI image's config) that nothing rewrites afterwards.
// A tree is shared by servers with different databases (a test server's store links the
// shared base; `cove template build --templates DIR` builds on the host with the data dir's
// own records), so a tree without a record (or newer than its record) is adopted: its
// record is made from its manifest, at open and when a name is looked up (records.go).
//
// Names and the store's own directories never meet: a template name starts with a letter or
// digit (ValidName), and everything the store keeps for itself starts with a dot (.layers,
// .build-*, .trash-*, .failed, .uploads, .lock-*, the image caches .image-<digest>) or holds
// an @ (tags). A tenant's name can so never replace the layer store or an image cache.
//
// The store's directory is 0700: the trees below it are tenants' (image roots keep their
// setuid binaries, for sudo in sandboxes), and no local user may reach them. OpenAt makes it
// so when it finds the directory open to group or others, and logs that it did.
type Store struct {
	dir     string
	records store.Templates // the records of templates, tags and layers (records.go)
	replica *Replica        // the object store templates are shared through; nil: none (replica.go)

	mu sync.Mutex // serialises the final renames
}

// The store's own directories at its top; see Store.
const (
	layersDir       = ".layers"
	legacyLayersDir = "layers" // where stores kept layers before .layers: moved by OpenAt
	imagePrefix     = ".image-"
)

// InternalName reports whether name is a root template the store made for itself (an image
// cache, .image-<sha256 hex>): never a name a caller can give.
func InternalName(name string) bool {
	h, ok := strings.CutPrefix(name, imagePrefix)
	return ok && ValidHash(h)
}

// ImageRoot is the name of the store's own root template unpacked from the image whose
// digest is hex (sha256): InternalName, no name a caller can give.
func ImageRoot(hex string) string { return imagePrefix + hex }

var validName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`) }) // compiled on first use, not at every start of the binary

// ValidName reports whether name can name a template.
func ValidName(name string) error {
	if !validName().MatchString(name) {
		return fmt.Errorf("%w: name %q must be 1-63 of [a-z0-9_-] starting with a letter or digit", ErrInvalid, name)
	}
	return nil
}

// Open opens (creating) the template store under dataDir, its records in records, removes
// what interrupted builds and removals left and adopts the trees and layers that have no
// record (records.go). Builds into it are internal/builder/template/build's.
func Open(ctx context.Context, dataDir string, records store.Templates) (*Store, error) {
	return OpenAt(ctx, filepath.Join(dataDir, "templates"), records)
}

// OpenAt opens the template store in dir itself, which several data dirs may share (test
// servers share one base template this way).
func OpenAt(ctx context.Context, dir string, records store.Templates) (*Store, error) {
	if records == nil {
		return nil, errors.New("open template store: no store for its records")
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("open template store: %w", err)
	}
	if err := Private(dir); err != nil {
		return nil, fmt.Errorf("open template store: %w", err)
	}
	if err := migrateLayers(dir); err != nil {
		return nil, fmt.Errorf("open template store: %w", err)
	}
	leftovers, _ := filepath.Glob(filepath.Join(dir, ".build-*"))
	trash, _ := filepath.Glob(filepath.Join(dir, ".trash-*"))
	layers, _ := filepath.Glob(filepath.Join(dir, layersDir, ".build-*"))
	for _, d := range append(append(leftovers, trash...), layers...) {
		release, ok := abandoned(d)
		if !ok {
			continue // another process is building or removing there
		}
		err := RemoveTree(d)
		release()
		if err != nil {
			return nil, fmt.Errorf("open template store: remove leftover %s: %w", d, err)
		}
	}
	s := &Store{dir: dir, records: records}
	if err := s.adopt(ctx); err != nil {
		return nil, fmt.Errorf("open template store: %w", err)
	}
	return s, nil
}

// Private makes dir reachable by its owner only, logging when it was not.
func Private(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if fi.Mode().Perm()&0o077 == 0 {
		return nil
	}
	if err := os.Chmod(dir, fi.Mode().Perm()&0o700); err != nil {
		return fmt.Errorf("make %s reachable by its owner only (it holds tenants' files): %w", dir, err)
	}
	telemetry.Logger(context.Background()).Warn("template directory was open to other users: made it 0700 (it holds tenants' files: image roots, setuid binaries included, and uploads)",
		telemetry.KeyDir, dir, telemetry.KeyModeBefore, fmt.Sprintf("%04o", fi.Mode().Perm()))
	return nil
}

// migrateLayers moves a store's layers from legacyLayersDir, where stores kept them before,
// to layersDir, one rename each, so a crash at any point leaves a store the next open
// finishes. A legacyLayersDir holding a meta.json is a template named "layers": it stays.
//
// In its place it leaves a symlink to layersDir, so that a cove of the old layout still
// running on a shared store (or one rolled back to) finds its layers. The link is no
// template (Get and List pass it by) and a template named "layers" replaces it (publish):
// the layers stay where they are.
func migrateLayers(dir string) error {
	old := filepath.Join(dir, legacyLayersDir)
	fi, err := os.Lstat(old)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil || !fi.IsDir() {
		return err
	}
	if _, err := os.Stat(filepath.Join(old, "meta.json")); err == nil {
		return nil
	}
	if err := os.Rename(old, filepath.Join(dir, layersDir)); err == nil {
		_ = os.Symlink(layersDir, old) // the whole store in one rename
		return nil
	} else if errors.Is(err, os.ErrNotExist) {
		return nil // another process did it
	}
	// .layers exists too (a cove of the old layout made layers after a migration): move
	// the layers it lacks, one by one, and drop the old directory once it is empty.
	if err := os.MkdirAll(filepath.Join(dir, layersDir), 0o700); err != nil {
		return err
	}
	entries, err := os.ReadDir(old)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue // a build the old cove left or still runs: its own open sweeps it
		}
		err := os.Rename(filepath.Join(old, e.Name()), filepath.Join(dir, layersDir, e.Name()))
		if err != nil && !errors.Is(err, os.ErrExist) && !errors.Is(err, unix.ENOTEMPTY) && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("move layer %s to %s: %w", e.Name(), layersDir, err)
		}
	}
	if os.Remove(old) == nil { // only when empty: a duplicate layer or a build of the old cove stays
		_ = os.Symlink(layersDir, old)
	}
	return nil
}

// Dir is the store's directory, <data>/templates unless opened elsewhere.
func (s *Store) Dir() string { return s.dir }

// Get returns the ready template called name, or ErrNotFound. The store's image caches are
// not found by name: only the templates built on them reach them.
func (s *Store) Get(name string) (*Template, error) {
	if n, tag := SplitTag(name); tag != "" {
		return s.getTagged(n, tag)
	}
	if err := ValidName(name); err != nil {
		return nil, fmt.Errorf("get template: %w", err)
	}
	return s.get(name)
}

// Lookup is Get that finds the store's own roots (image caches) too: for the builder, which
// builds on them.
func (s *Store) Lookup(name string) (*Template, error) {
	if InternalName(name) {
		return s.get(name)
	}
	return s.Get(name)
}

// get returns the ready template name, a valid name or one of the store's own roots, its
// tree in place (current).
func (s *Store) get(name string) (*Template, error) {
	if ValidName(name) != nil && !InternalName(name) {
		return nil, fmt.Errorf("get template: %w", ValidName(name))
	}
	t, err := s.current(context.Background(), name)
	if err != nil {
		return nil, err
	}
	if err := s.Resolve(t); err != nil {
		return nil, err
	}
	return t, nil
}

// Resolve fills in where a template built in steps finds its root's rootfs and its layers.
func (s *Store) Resolve(t *Template) error {
	if t.Root == "" {
		return nil
	}
	root, err := s.current(context.Background(), t.Root)
	if err != nil {
		return fmt.Errorf("template %s: its root template %s: %w", t.Name, t.Root, ErrNotFound)
	}
	t.Rootfs = root.Rootfs
	t.LayerDirs = make([]string, 0, len(t.Layers))
	for i := len(t.Layers) - 1; i >= 0; i-- {
		t.LayerDirs = append(t.LayerDirs, s.LayerDiff(t.Layers[i]))
	}
	return nil
}

// List returns every ready template, by name: their records, with the places of their files
// (a tree another node built is fetched when a sandbox needs it, not to list it).
func (s *Store) List() ([]*Template, error) {
	recs, err := s.records.ListTemplates(context.Background())
	if err != nil {
		return nil, fmt.Errorf("list templates: %w", err)
	}
	var ts []*Template
	for _, r := range recs {
		if ValidName(r.Name) != nil {
			continue // the store's own roots (image caches)
		}
		t, err := decodeRecord(r)
		if err != nil {
			return nil, err
		}
		s.place(t, r.Name)
		if t.Root != "" {
			t.Rootfs = filepath.Join(s.dir, t.Root, "rootfs")
			t.LayerDirs = make([]string, 0, len(t.Layers))
			for i := len(t.Layers) - 1; i >= 0; i-- {
				t.LayerDirs = append(t.LayerDirs, s.LayerDiff(t.Layers[i]))
			}
		}
		ts = append(ts, t)
	}
	return ts, nil
}

// Remove deletes the template called name. The name is free as soon as Remove returns. The
// caller must make sure no sandbox still uses the template's rootfs as its lower layer.
func (s *Store) Remove(name string) error {
	if err := ValidName(name); err != nil {
		return fmt.Errorf("remove template: %w", err)
	}
	if on := s.BuiltOn(name); on != "" {
		return fmt.Errorf("%w: remove template %s: template %s is built on it; remove that first", ErrInUse, name, on)
	}
	// The tree goes to the trash first, then the record: a crash between the two leaves a
	// record without files (removed again, or fetched again from the object store), never
	// a tree without a record, which the next open would adopt back.
	s.mu.Lock()
	trash := filepath.Join(s.dir, ".trash-"+name+"-"+randomSuffix())
	unlock, lerr := LockDir(filepath.Join(s.dir, name)) // held across the rename: a sweep skips it
	err := os.Rename(filepath.Join(s.dir, name), trash)
	hadTree := err == nil
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		s.mu.Unlock()
		if lerr == nil {
			unlock()
		}
		return fmt.Errorf("remove template %s: %w", name, err)
	}
	rerr := s.records.DeleteTemplate(context.Background(), name)
	s.mu.Unlock()
	if lerr == nil {
		defer unlock()
	}
	if errors.Is(rerr, store.ErrNotFound) && !hadTree {
		return fmt.Errorf("remove template %s: %w", name, ErrNotFound)
	}
	if rerr != nil && !errors.Is(rerr, store.ErrNotFound) {
		return fmt.Errorf("remove template %s: %w", name, rerr)
	}
	if hadTree {
		if err := RemoveTree(trash); err != nil {
			return fmt.Errorf("remove template %s: %w", name, err)
		}
	}
	if _, err := s.FreeLayers(); err != nil {
		return fmt.Errorf("remove template %s: free its layers: %w", name, err)
	}
	if s.replica != nil {
		// Its files leave the object store too (other nodes' copies stay until they remove
		// theirs); the record's going is what makes the name free on every node.
		for _, k := range []string{treeKey(name), legacyMetaKey(name)} {
			if err := s.replica.Blobs.Delete(context.Background(), k); err != nil && !errors.Is(err, blob.ErrNotFound) {
				return fmt.Errorf("remove template %s from the object store: %w", name, err)
			}
		}
	}
	return nil
}

// BuiltOn names a template whose layers stand on the root template name, "" when none does.
func (s *Store) BuiltOn(name string) string {
	all, _ := s.List()
	for _, t := range all {
		if t.Root == name {
			return t.Name
		}
	}
	return ""
}

// VisibleTo reports whether team may see and start sandboxes from t.
func (t *Template) VisibleTo(team string) bool {
	return t.TeamID == "" || t.Public || t.TeamID == team
}

// SetPublic makes the template name every team's (public) or its team's own.
func (s *Store) SetPublic(name string, public bool) error {
	return s.updateMeta(name, func(t *Template) { t.Public = public })
}

// CheckOwner reports, as ErrNotOwner, whether team may not change the template name over
// the API (rebuild, tag, delete it). A name no template has yet is free.
func (s *Store) CheckOwner(name, team string) error {
	t, err := s.Get(name)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if t.TeamID == "" || t.TeamID != team {
		return fmt.Errorf("%w: %s (it was made on the host or by another team's API key)", ErrNotOwner, name)
	}
	return nil
}

// SetCollectLogs records whether sandboxes of the template collect their commands' output.
func (s *Store) SetCollectLogs(name string, on bool) error {
	return s.updateMeta(name, func(t *Template) { t.CollectLogs = &on })
}

// updateMeta changes the settings of the ready template name in its record (never in its
// tree's manifest, which describes the files as built).
func (s *Store) updateMeta(name string, change func(*Template)) error {
	if _, err := s.Get(name); err != nil { // adopts a tree without a record
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ctx := context.Background()
	t, err := s.readRecord(ctx, name, "")
	if err != nil {
		return err
	}
	change(t)
	return s.putRecord(ctx, t, "", true)
}

// readMeta reads the manifest of the tree dir, its file places set to dir's.
func readMeta(dir string) (*Template, error) {
	b, err := os.ReadFile(filepath.Join(dir, "meta.json"))
	if err != nil {
		return nil, err
	}
	var t Template
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, fmt.Errorf("meta.json: %w", err)
	}
	t.Rootfs = filepath.Join(dir, "rootfs")
	t.BuildLog = filepath.Join(dir, "build.log")
	if t.StartSnapshot != nil {
		t.StartSnapshot.Dir = filepath.Join(dir, StartSnapshotDir)
	}
	return &t, nil
}

// writeMeta writes the manifest of the build tree dir, once, before the tree is renamed into
// place.
func writeMeta(dir string, t *Template) error {
	b, err := json.MarshalIndent(t, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "meta.json"), append(b, '\n'), 0o644)
}

// RemoveTree unmounts whatever an interrupted build left mounted below dir (debootstrap mounts
// /proc and /sys in its target), then deletes dir. It never deletes through a mount.
func RemoveTree(dir string) error {
	if err := unmountUnder(dir); err != nil {
		return err
	}
	return os.RemoveAll(dir)
}

func unmountUnder(dir string) error {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	var points []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 5 {
			continue
		}
		p := unescapeMountinfo(fields[4])
		if p == dir || strings.HasPrefix(p, dir+"/") {
			points = append(points, p)
		}
	}
	f.Close()
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) }) // deepest first
	for _, p := range points {
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("unmount %s: %w", p, err)
		}
	}
	return nil
}

// unescapeMountinfo undoes the octal escapes (\040 for space) of /proc/self/mountinfo paths.
func unescapeMountinfo(s string) string { return runtime.UnescapeMountinfo(s) }

func randomSuffix() string {
	b := make([]byte, 4)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// ValidHash reports whether h is a sha256 in hex: the name of an upload, of an image cache.
func ValidHash(h string) bool {
	if len(h) != 64 {
		return false
	}
	_, err := hex.DecodeString(h)
	return err == nil
}
