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

	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/store"
)

// A template's record (store.Templates) says that it exists and everything about it; its
// tree says where its files are. The two meet here:
//
//   - A record is written once the tree it describes is in place (and, in a cluster, in the
//     object store): a name is found only once its files can be had.
//   - A tree without a record, or of a newer build than its record's, is adopted: its record
//     is made from the tree's manifest (meta.json, written once by its build), keeping the
//     settings the old record had (public, log collection). That is how the trees, tags and
//     layers of a release that kept records as meta.json files move into the store, how a
//     crash between a rename and a record's write is finished, and how a store sees a tree
//     that a server with another database (the CLI on a shared directory) built there.
//   - A record whose tree this node lacks, or holds an older build of, has its files fetched
//     from the object store (replica.go); without one the template's files are missing.
//   - A tree a node of a cluster built or fetched (it holds clusterMark) is never adopted:
//     its record is in the cluster's one database, and went when the template was removed,
//     through whichever node; nor does a look-up on such a node adopt a tree (one of a
//     release before is adopted when the node opens its store).

// clusterMark is the file in a tree a node of a cluster built or fetched: such a tree is never
// adopted (a tree without it there is one of the release before the records, or of a store
// without a cluster).
const clusterMark = ".cluster"

// decodeRecord is the template a record holds, without the places of its files.
func decodeRecord(r *store.TemplateRecord) (*Template, error) {
	var t Template
	if err := json.Unmarshal(r.Record, &t); err != nil {
		return nil, fmt.Errorf("template %s: its record: %w", r.Name, err)
	}
	return &t, nil
}

// readRecord returns the record of name and tag ("" for the name itself); ErrNotFound when
// there is none.
func (s *Store) readRecord(ctx context.Context, name, tag string) (*Template, error) {
	r, err := s.records.GetTemplate(ctx, name, tag)
	if errors.Is(err, store.ErrNotFound) {
		ref := name
		if tag != "" {
			ref += ":" + tag
		}
		return nil, fmt.Errorf("template %s: %w", ref, ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	return decodeRecord(r)
}

// putRecord writes t as the record of its name and tag, over the one there with replace.
func (s *Store) putRecord(ctx context.Context, t *Template, tag string, replace bool) error {
	b, err := json.Marshal(t)
	if err != nil {
		return err
	}
	return s.records.PutTemplate(ctx, &store.TemplateRecord{Name: t.Name, Tag: tag, TeamID: t.TeamID,
		BuildID: t.BuildID, CreatedAt: t.CreatedAt, Record: b}, replace)
}

// place sets where the files of t, read from the record of name (or of one of its tags),
// are: in name's tree. A start snapshot this node lacks (another node's build took it) is
// none here: sandboxes run the start command.
func (s *Store) place(t *Template, name string) {
	dir := filepath.Join(s.dir, name)
	t.Rootfs = filepath.Join(dir, "rootfs")
	t.BuildLog = filepath.Join(dir, "build.log")
	if t.StartSnapshot != nil {
		t.StartSnapshot.Dir = filepath.Join(dir, StartSnapshotDir)
		if !exists(t.StartSnapshot.Dir) {
			t.StartSnapshot = nil
		}
	}
}

// current returns the record of name with its tree in place: a tree without a record, or
// of another build than its record's without an object store to fetch that build from, is
// adopted; a tree the node lacks, or holds an older build of, is fetched.
func (s *Store) current(ctx context.Context, name string) (*Template, error) {
	t, err := s.readRecord(ctx, name, "")
	if err != nil && !errors.Is(err, ErrNotFound) {
		return nil, err
	}
	tree := filepath.Join(s.dir, name)
	m, merr := readMeta(tree)
	cluster := exists(filepath.Join(tree, clusterMark))
	switch {
	case t == nil && (merr != nil || cluster || s.replica != nil):
		return nil, fmt.Errorf("template %s: %w", name, ErrNotFound)
	case merr == nil && t != nil && m.CreatedAt.Equal(t.CreatedAt):
	case merr == nil && !cluster && (t == nil || m.CreatedAt.After(t.CreatedAt) || s.replica == nil):
		if t, err = s.adoptTree(ctx, m, t); err != nil {
			return nil, err
		}
	case s.replica != nil:
		fctx, cancel := context.WithTimeout(ctx, 30*time.Minute) // a whole root's tree, at worst
		err := s.fetch(fctx, t)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("template %s: %w", name, err)
		}
	default:
		return nil, fmt.Errorf("%w: template %s: its files are not in %s (and no object store holds them)", ErrNotFound, name, tree)
	}
	s.place(t, name)
	return t, nil
}

// adoptTree makes the record of the tree whose manifest is m, over had (the record there, of
// another build; nil when there is none), whose settings it keeps.
func (s *Store) adoptTree(ctx context.Context, m, had *Template) (*Template, error) {
	t := *m
	t.Rootfs, t.BuildLog, t.LayerDirs = "", "", nil
	if had != nil {
		t.Public, t.CollectLogs = had.Public, had.CollectLogs
	}
	err := s.putRecord(ctx, &t, "", had != nil)
	if errors.Is(err, store.ErrConflict) {
		return s.readRecord(ctx, t.Name, "") // adopted by another process first
	}
	if err != nil {
		return nil, fmt.Errorf("adopt template %s: %w", t.Name, err)
	}
	telemetry.Logger(ctx).Info("template adopted: its record made from its tree's meta.json",
		telemetry.KeyTemplateID, t.Name, telemetry.KeyDir, filepath.Join(s.dir, t.Name))
	return &t, nil
}

// adopt makes the records of the trees, tags and layers in the store's directory that have
// none, as OpenAt does. The tag directories of a release before (<name>@<tag>/meta.json)
// become tag records and go, each record first, so a crash leaves what the next open ends.
func (s *Store) adopt(ctx context.Context) error {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		if n, tag, ok := strings.Cut(name, "@"); ok {
			if err := s.adoptTag(ctx, n, tag); err != nil {
				return err
			}
			continue
		}
		if ValidName(name) != nil && !InternalName(name) {
			continue // the store's own directories
		}
		m, err := readMeta(filepath.Join(s.dir, name))
		if err != nil || m.Name != name || exists(filepath.Join(s.dir, name, clusterMark)) {
			continue // no tree (the link to .layers a release before left, say), or a cluster's
		}
		had, err := s.readRecord(ctx, name, "")
		if err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
		if had != nil && !m.CreatedAt.After(had.CreatedAt) {
			continue
		}
		if _, err := s.adoptTree(ctx, m, had); err != nil {
			return err
		}
	}
	return s.adoptLayers(ctx)
}

// adoptTag moves the tag directory <name>@<tag> of a release before into a tag record.
func (s *Store) adoptTag(ctx context.Context, name, tag string) error {
	dir := s.tagDir(name, tag)
	if ValidName(name) != nil || ValidName(tag) != nil {
		return nil
	}
	m, err := readMeta(dir)
	if err != nil {
		return nil // not a tag's directory
	}
	m.Rootfs, m.BuildLog = "", ""
	if err := s.putRecord(ctx, m, tag, false); err != nil && !errors.Is(err, store.ErrConflict) {
		return fmt.Errorf("adopt tag %s:%s: %w", name, tag, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("adopt tag %s:%s: %w", name, tag, err)
	}
	telemetry.Logger(ctx).Info("template tag adopted: its record made from its directory's meta.json, the directory removed",
		telemetry.KeyTemplateID, name+":"+tag, telemetry.KeyDir, dir)
	return nil
}

// adoptLayers makes the records of the layers on disk that have none.
func (s *Store) adoptLayers(ctx context.Context) error {
	entries, err := os.ReadDir(s.LayersDir())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	recs, err := s.records.ListTemplateLayers(ctx)
	if err != nil {
		return fmt.Errorf("adopt layers: %w", err)
	}
	have := map[string]bool{}
	for _, r := range recs {
		have[r.Key] = true
	}
	n := 0
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") || have[e.Name()] {
			continue
		}
		l, err := s.layerManifest(e.Name())
		if err != nil || l.Key != e.Name() {
			continue // not a complete layer
		}
		if err := s.putLayer(ctx, l); err != nil && !errors.Is(err, store.ErrConflict) {
			return fmt.Errorf("adopt layer %s: %w", l.Key, err)
		}
		n++
	}
	if n > 0 {
		telemetry.Logger(ctx).Info("template layers adopted: their records made from their meta.json",
			telemetry.KeyDir, s.LayersDir(), telemetry.KeyDetail, fmt.Sprintf("%d layers", n))
	}
	return nil
}

// putLayer writes the record of l.
func (s *Store) putLayer(ctx context.Context, l *Layer) error {
	b, err := json.Marshal(l)
	if err != nil {
		return err
	}
	return s.records.PutTemplateLayer(ctx, &store.TemplateLayer{Key: l.Key, CreatedAt: l.CreatedAt, Record: b})
}
