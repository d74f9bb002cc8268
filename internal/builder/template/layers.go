package template

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/internal/sandbox/runtime"
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

// Layer is one built step: what it changed, and what it was built from.
type Layer struct {
	Key       string    `json:"key"`
	Parent    string    `json:"parent"` // the key below, or the root's identity
	Step      string    `json:"step"`
	SizeBytes int64     `json:"size_bytes"`
	CreatedAt time.Time `json:"created_at"`
	BuildTime float64   `json:"build_seconds"`
}

// LayersDir is where layers live; the builder builds them in hidden directories below it.
func (s *Store) LayersDir() string          { return filepath.Join(s.dir, layersDir) }
func (s *Store) layerDir(key string) string { return filepath.Join(s.LayersDir(), key) }

// LayerDiff is the directory holding what the layer key changed.
func (s *Store) LayerDiff(key string) string { return filepath.Join(s.layerDir(key), "diff") }

// ReadLayer returns the record of the layer key.
func (s *Store) ReadLayer(key string) (*Layer, error) {
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

// HaveLayer reports whether the layer key is recorded and its files are here, fetching them
// from the object store when only the record is (another node built it).
func (s *Store) HaveLayer(ctx context.Context, key string) bool {
	if _, err := s.ReadLayer(key); err != nil {
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

// FreeLayers deletes every layer no template references. It skips the sweep when a build holds
// the layers lock (a build in progress references layers no template lists yet).
func (s *Store) FreeLayers() (freed int64, err error) {
	if err := os.MkdirAll(s.LayersDir(), 0o700); err != nil {
		return 0, err
	}
	release, ok := abandoned(s.LayersDir())
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
	entries, err := os.ReadDir(s.LayersDir())
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
		if err := RemoveTree(s.layerDir(e.Name())); err != nil {
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

// HoldLayers keeps FreeLayers off while a build runs: a shared lock on the layers directory.
func (s *Store) HoldLayers() (release func(), err error) {
	if err := os.MkdirAll(s.LayersDir(), 0o700); err != nil {
		return nil, err
	}
	f, err := os.Open(s.LayersDir())
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
			l, err := s.ReadLayer(k)
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
	if err := os.MkdirAll(s.LayersDir(), 0o700); err != nil {
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
