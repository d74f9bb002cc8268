package template

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/cove-dev/cove/internal/blob"
	"github.com/cove-dev/cove/internal/telemetry"
)

// Templates in an object store (a cluster's --objects, issue 24). A node that builds a
// template pushes it: each of its layers (blob layers/<key>.tar) and its root (itself a
// template, pushed the same way) that the store lacks, then its meta.json last
// (templates/<name>/meta.json), so a template is visible to the other nodes only once every
// part is there. A node asked for a template it does not hold fetches it: the meta, the root
// and the layers it lacks, each unpacked beside its final place and renamed in, as a build
// publishes. Layers are named by their content's key, so a node fetches only what it lacks
// (every node has the base's). A root template's own files travel as one tar
// (templates/<name>/tree.tar), without its start snapshot, which is the node's own.
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

func metaKey(name string) string  { return "templates/" + name + "/meta.json" }
func treeKey(name string) string  { return "templates/" + name + "/tree.tar" }
func layerBlob(key string) string { return "layers/" + key + ".tar" }
func (r *Replica) log() *slog.Logger {
	if r.Logger != nil {
		return r.Logger
	}
	return slog.Default()
}

// push uploads template name and what it stands on, meta last. Parts the object store has
// already are not sent again.
func (s *Store) push(ctx context.Context, name string) error {
	r := s.replica
	if r == nil {
		return nil
	}
	begun := time.Now()
	t, err := readMeta(filepath.Join(s.dir, name))
	if err != nil {
		return fmt.Errorf("push template %s: %w", name, err)
	}
	if t.Root != "" {
		if _, err := r.Blobs.Stat(ctx, metaKey(t.Root)); errors.Is(err, blob.ErrNotFound) {
			if err := s.push(ctx, t.Root); err != nil {
				return err
			}
		} else if err != nil {
			return fmt.Errorf("push template %s: %w", name, err)
		}
	} else if err := blob.PutTree(ctx, r.Blobs, treeKey(name), filepath.Join(s.dir, name), "./"+StartSnapshotDir); err != nil {
		return fmt.Errorf("push template %s: %w", name, err)
	}
	for _, k := range t.Layers {
		if _, err := r.Blobs.Stat(ctx, layerBlob(k)); err == nil {
			continue
		}
		if err := blob.PutTree(ctx, r.Blobs, layerBlob(k), s.layerDir(k), ""); err != nil {
			return fmt.Errorf("push template %s: layer %s: %w", name, k, err)
		}
	}
	meta, err := os.ReadFile(filepath.Join(s.dir, name, "meta.json"))
	if err != nil {
		return fmt.Errorf("push template %s: %w", name, err)
	}
	if meta, err = withoutStartSnapshot(meta); err != nil {
		return fmt.Errorf("push template %s: %w", name, err)
	}
	if err := r.Blobs.Put(ctx, metaKey(name), bytes.NewReader(meta), int64(len(meta))); err != nil {
		return fmt.Errorf("push template %s: %w", name, err)
	}
	r.log().Info("template pushed to the object store", telemetry.KeyTemplateID, name, telemetry.KeyDurationMS, time.Since(begun).Milliseconds())
	return nil
}

// withoutStartSnapshot drops a meta's start snapshot: it is the building node's own.
func withoutStartSnapshot(meta []byte) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(meta, &m); err != nil {
		return nil, fmt.Errorf("meta.json: %w", err)
	}
	delete(m, "start_snapshot")
	return json.Marshal(m)
}

// fetch brings template name from the object store into this store: ErrNotFound when the
// object store has none either.
func (s *Store) fetch(ctx context.Context, name string) error {
	r := s.replica
	if r == nil {
		return ErrNotFound
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return s.fetchLocked(ctx, r, name)
}

// fetchLocked is fetch with r.mu held: a template's root is fetched first, under the same hold.
func (s *Store) fetchLocked(ctx context.Context, r *Replica, name string) error {
	if _, err := readMeta(filepath.Join(s.dir, name)); err == nil {
		return nil // fetched by the asker before
	}
	begun := time.Now()
	rc, err := r.Blobs.Get(ctx, metaKey(name))
	if errors.Is(err, blob.ErrNotFound) {
		return ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("fetch template %s: %w", name, err)
	}
	meta, err := io.ReadAll(io.LimitReader(rc, 1<<20))
	rc.Close()
	if err != nil {
		return fmt.Errorf("fetch template %s: %w", name, err)
	}
	var t Template
	if err := json.Unmarshal(meta, &t); err != nil {
		return fmt.Errorf("fetch template %s: meta.json: %w", name, err)
	}
	if t.Root != "" {
		if err := s.fetchLocked(ctx, r, t.Root); err != nil {
			return fmt.Errorf("fetch template %s: its root %s: %w", name, t.Root, err)
		}
	}
	if err := os.MkdirAll(s.layersDir(), 0o700); err != nil {
		return err
	}
	for _, k := range t.Layers {
		if exists(s.layerDir(k)) {
			continue
		}
		if err := blob.GetTree(ctx, r.Blobs, layerBlob(k), s.layersDir(), k); err != nil {
			return fmt.Errorf("fetch template %s: layer %s: %w", name, k, err)
		}
	}
	if t.Root == "" {
		if err := blob.GetTree(ctx, r.Blobs, treeKey(name), s.dir, name); err != nil {
			return fmt.Errorf("fetch template %s: %w", name, err)
		}
		// The tree's meta.json is the one pushed last (a replaced template's newest).
		if err := os.WriteFile(filepath.Join(s.dir, name, "meta.json"), meta, 0o600); err != nil {
			return fmt.Errorf("fetch template %s: %w", name, err)
		}
	} else {
		tmp, err := os.MkdirTemp(s.dir, ".fetch-"+name+"-")
		if err != nil {
			return fmt.Errorf("fetch template %s: %w", name, err)
		}
		if err := os.WriteFile(filepath.Join(tmp, "meta.json"), meta, 0o600); err != nil {
			os.RemoveAll(tmp)
			return fmt.Errorf("fetch template %s: %w", name, err)
		}
		if err := s.publish(tmp, name, false); err != nil && !errors.Is(err, ErrExists) {
			os.RemoveAll(tmp)
			return fmt.Errorf("fetch template %s: %w", name, err)
		}
	}
	r.log().Info("template fetched from the object store", telemetry.KeyTemplateID, name, telemetry.KeyDurationMS, time.Since(begun).Milliseconds())
	return nil
}
