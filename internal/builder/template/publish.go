package template

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cove-dev/cove/internal/store"
	"golang.org/x/sys/unix"
)

// The builder (internal/builder/template/build) makes templates through the primitives below: a
// tree it fills in a hidden directory of the store (NewTree), which Publish makes a ready
// template, and layers it builds below LayersDir, which PublishLayer makes ready (HoldLayers
// keeps FreeLayers off them meanwhile). Besides, it reads what a build stands on (Lookup,
// which finds the store's own image roots too, Resolve, ReadLayer, HaveLayer, BuiltOn), asks
// for the sweeps a replacing build calls for (FreeLayers, FreeRoots) and shares the store's
// helpers for its own directories (LockDir, RemoveTree, Private). Nothing else of the store
// is the builder's to touch.

// NewTree makes a hidden build directory for the template name in the store, locked (so no
// open sweeps it while the builder works in it) until release. The builder fills it (rootfs,
// build.log, start-snapshot), then Publishes it or removes it (RemoveTree).
func (s *Store) NewTree(name string) (dir string, release func(), err error) {
	dir = filepath.Join(s.dir, ".build-"+name+"-"+randomSuffix())
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", nil, err
	}
	release, err = LockDir(dir)
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	return dir, release, nil
}

// Publish makes the finished tree dir (from NewTree) the ready template t: it writes the
// tree's manifest, shares the tree through the object store, renames it to its name and
// writes its record, the moment it becomes ready. With replace, a ready template of that
// name is swapped out in one rename and deleted; without, a name with a record (or a tree)
// is ErrExists, found before the tree's files reach the object store, where they would
// replace the recorded template's.
func (s *Store) Publish(ctx context.Context, dir string, t *Template, replace bool) error {
	if err := writeMeta(dir, t); err != nil {
		return err
	}
	if !replace {
		if _, err := s.readRecord(ctx, t.Name, ""); err == nil {
			return ErrExists
		}
	}
	if err := s.push(ctx, t, dir); err != nil {
		return fmt.Errorf("share it with the other nodes: %w", err)
	}
	return s.publish(ctx, dir, t, replace)
}

// publish renames the finished build directory of t to its template name, then writes its
// record. s.mu serialises it with the other renames.
func (s *Store) publish(ctx context.Context, build string, t *Template, replace bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	swap := replace
	if !replace {
		_, err := s.readRecord(ctx, t.Name, "")
		switch {
		case err == nil:
			return ErrExists
		case !errors.Is(err, ErrNotFound):
			return err
		}
		// The name is free: a tree there without a record (a copy fetched before the
		// template was removed through another node) goes.
		swap = true
	}
	if s.replica != nil {
		// A cluster's tree: without its record (removed through another node) it is none.
		if err := os.WriteFile(filepath.Join(build, clusterMark), nil, 0o600); err != nil {
			return err
		}
	}
	if err := s.placeTree(build, t.Name, swap); err != nil {
		return err
	}
	// A crash here leaves a tree without a record, which the next look-up adopts.
	if err := s.putRecord(ctx, t, "", replace); err != nil {
		return fmt.Errorf("record template %s: %w", t.Name, err)
	}
	return nil
}

// placeTree renames the tree build to name's place, swapping out (and deleting) the tree
// there with replace; ErrExists when one is there without. s.mu is held.
func (s *Store) placeTree(build, name string, replace bool) error {
	final := filepath.Join(s.dir, name)
	if fi, err := os.Lstat(final); err == nil && name == legacyLayersDir && fi.Mode()&os.ModeSymlink != 0 {
		if err := os.Remove(final); err != nil { // the link migrateLayers left: no template
			return fmt.Errorf("publish %s: %w", name, err)
		}
	}
	if _, err := os.Lstat(final); err == nil {
		if !replace {
			return ErrExists
		}
		if err := unix.Renameat2(unix.AT_FDCWD, build, unix.AT_FDCWD, final, unix.RENAME_EXCHANGE); err != nil {
			return fmt.Errorf("replace %s: %w", name, err)
		}
		return RemoveTree(build) // now the old template
	}
	return os.Rename(build, final)
}

// PublishLayer makes the finished layer directory work (a hidden directory below LayersDir
// holding the layer's diff) the layer l: it writes its manifest, renames it to its key and
// records it. It reports cached when a concurrent build published the same layer first (work
// is removed then).
func (s *Store) PublishLayer(ctx context.Context, work string, l *Layer) (cached bool, err error) {
	key := l.Key
	b, _ := json.MarshalIndent(l, "", "  ")
	if err := os.WriteFile(filepath.Join(work, "meta.json"), append(b, '\n'), 0o644); err != nil {
		return false, err
	}
	if err := os.Rename(work, s.layerDir(key)); err != nil {
		if _, rerr := s.layerManifest(key); rerr == nil {
			cached = true // a concurrent build made the same layer first
			if err := RemoveTree(work); err != nil {
				return true, err
			}
		} else if rerr := os.RemoveAll(s.layerDir(key)); rerr == nil && os.Rename(work, s.layerDir(key)) == nil {
			// files of a layer that lost its record (gone with the templates using it while
			// this node kept a copy): replaced by the new build's
		} else {
			return false, fmt.Errorf("publish layer %s: %w", key, err)
		}
	}
	if err := s.putLayer(ctx, l); err != nil && !errors.Is(err, store.ErrConflict) {
		return cached, fmt.Errorf("record layer %s: %w", key, err)
	}
	return cached, nil
}
