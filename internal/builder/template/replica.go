package template

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/cove-dev/cove/internal/blob"
	"github.com/cove-dev/cove/internal/observe/telemetry"
)

// Templates' files in an object store (a cluster's --objects, issue 24); their records are in
// the cluster's one database, so every node finds a template as soon as its record is there.
// A node that builds a template pushes its files before it writes the record: each of its
// layers (blob layers/<key>.tar) and its root (itself a template, pushed the same way) that
// the object store lacks, and a root template's own files as one tar (templates/<name>/
// tree.tar, without its start snapshot, which is the node's own). A node asked for a
// template whose tree it lacks, or holds an older build of, fetches it: the root and the
// layers it lacks, each unpacked beside its final place and renamed in, as a build publishes,
// then the tree with the record's manifest. Layers are named by their content's key, so a
// node fetches only what it lacks (every node has the base's).
//
// The tars are blob.PutTree's: overlay whiteouts and opaque directories survive.

// Replica is the object store a template store shares its templates through.
type Replica struct {
	Blobs  blob.Store
	Logger *slog.Logger

	mu sync.Mutex // one fetch at a time: a second asker finds the template fetched
}

// SetReplica makes the store push what it builds to r and fetch from r a template it lacks.
func (s *Store) SetReplica(r *Replica) { s.replica = r }

// legacyMetaKey is where a release before published a template's meta.json: Remove deletes it.
func legacyMetaKey(name string) string { return "templates/" + name + "/meta.json" }
func treeKey(name string) string       { return "templates/" + name + "/tree.tar" }
func layerBlob(key string) string      { return "layers/" + key + ".tar" }
func (r *Replica) log() *slog.Logger {
	if r.Logger != nil {
		return r.Logger
	}
	return slog.Default()
}

// push uploads the files of template t, whose tree is in tree, and what it stands on: the
// record that makes it visible to the other nodes is written after. Parts the object store
// has already are not sent again.
func (s *Store) push(ctx context.Context, t *Template, tree string) error {
	r := s.replica
	if r == nil {
		return nil
	}
	begun := time.Now()
	if t.Root != "" {
		if _, err := r.Blobs.Stat(ctx, treeKey(t.Root)); errors.Is(err, blob.ErrNotFound) {
			root, err := s.current(ctx, t.Root)
			if err != nil {
				return fmt.Errorf("push template %s: its root: %w", t.Name, err)
			}
			if err := s.push(ctx, root, filepath.Join(s.dir, t.Root)); err != nil {
				return err
			}
		} else if err != nil {
			return fmt.Errorf("push template %s: %w", t.Name, err)
		}
	} else if err := blob.PutTree(ctx, r.Blobs, treeKey(t.Name), tree, "./"+StartSnapshotDir); err != nil {
		return fmt.Errorf("push template %s: %w", t.Name, err)
	}
	for _, k := range t.Layers {
		if _, err := r.Blobs.Stat(ctx, layerBlob(k)); err == nil {
			continue
		}
		if err := blob.PutTree(ctx, r.Blobs, layerBlob(k), s.layerDir(k), ""); err != nil {
			return fmt.Errorf("push template %s: layer %s: %w", t.Name, k, err)
		}
	}
	r.log().Info("template pushed to the object store", telemetry.KeyTemplateID, t.Name, telemetry.KeyDurationMS, time.Since(begun).Milliseconds())
	return nil
}

// fetch brings the files of template t (its record) from the object store into this store:
// ErrNotFound when the object store has none either.
func (s *Store) fetch(ctx context.Context, t *Template) error {
	r := s.replica
	if r == nil {
		return ErrNotFound
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return s.fetchLocked(ctx, r, t)
}

// fetchLayer brings the files of the layer key from the object store.
func (s *Store) fetchLayer(ctx context.Context, key string) error {
	r := s.replica
	if r == nil {
		return ErrNotFound
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return s.fetchLayerLocked(ctx, r, key)
}

func (s *Store) fetchLayerLocked(ctx context.Context, r *Replica, key string) error {
	if exists(s.LayerDiff(key)) {
		return nil
	}
	if err := os.MkdirAll(s.LayersDir(), 0o700); err != nil {
		return err
	}
	err := blob.GetTree(ctx, r.Blobs, layerBlob(key), s.LayersDir(), key)
	if errors.Is(err, blob.ErrNotFound) {
		return fmt.Errorf("layer %s: %w", key, ErrNotFound)
	}
	return err
}

// fetchLocked is fetch with r.mu held: a template's root is fetched first, under the same hold.
func (s *Store) fetchLocked(ctx context.Context, r *Replica, t *Template) error {
	if m, err := readMeta(filepath.Join(s.dir, t.Name)); err == nil && !m.CreatedAt.Before(t.CreatedAt) {
		return nil // fetched by the asker before
	}
	begun := time.Now()
	if t.Root != "" {
		root, err := s.readRecord(ctx, t.Root, "")
		if err == nil {
			err = s.fetchLocked(ctx, r, root)
		}
		if err != nil {
			return fmt.Errorf("fetch template %s: its root %s: %w", t.Name, t.Root, err)
		}
	}
	for _, k := range t.Layers {
		if err := s.fetchLayerLocked(ctx, r, k); err != nil {
			return fmt.Errorf("fetch template %s: %w", t.Name, err)
		}
	}
	// The tree is made beside its place, with the record's manifest, and swapped in whole.
	manifest := *t
	manifest.StartSnapshot = nil // the building node's own
	build := ".build-fetch-" + t.Name + "-" + randomSuffix()
	if t.Root == "" {
		err := blob.GetTree(ctx, r.Blobs, treeKey(t.Name), s.dir, build)
		if errors.Is(err, blob.ErrNotFound) {
			return fmt.Errorf("fetch template %s: %w", t.Name, ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("fetch template %s: %w", t.Name, err)
		}
		_ = os.RemoveAll(filepath.Join(s.dir, build, StartSnapshotDir))
	} else if err := os.Mkdir(filepath.Join(s.dir, build), 0o700); err != nil {
		return fmt.Errorf("fetch template %s: %w", t.Name, err)
	}
	build = filepath.Join(s.dir, build)
	if err := os.WriteFile(filepath.Join(build, clusterMark), nil, 0o600); err != nil {
		os.RemoveAll(build)
		return fmt.Errorf("fetch template %s: %w", t.Name, err)
	}
	if err := writeMeta(build, &manifest); err != nil {
		os.RemoveAll(build)
		return fmt.Errorf("fetch template %s: %w", t.Name, err)
	}
	s.mu.Lock()
	err := s.placeTree(build, t.Name, true)
	s.mu.Unlock()
	if err != nil {
		os.RemoveAll(build)
		return fmt.Errorf("fetch template %s: %w", t.Name, err)
	}
	r.log().Info("template fetched from the object store", telemetry.KeyTemplateID, t.Name, telemetry.KeyDurationMS, time.Since(begun).Milliseconds())
	return nil
}
