// Package snapshot keeps sandbox snapshots on disk: a sandbox's processes, memory and files,
// checkpointed and exported, to start new sandboxes from (Sandbox.create(snapshotId)).
//
// The one idea: a snapshot is a directory, <dir>/<id>/, holding the runtime's export
// (checkpoint/ and upper/), and its record in the store (store.Snapshots), written last and
// keyed by the node that holds the directory, so a directory without its record is half made
// and never listed. Volumes are the same: a directory of files here, a record there.
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
	"time"

	"github.com/cove-dev/cove/internal/sandbox/egress"
	"github.com/cove-dev/cove/internal/sandbox/network"
	"github.com/cove-dev/cove/internal/store"
)

// ErrNotFound: no such snapshot.
var ErrNotFound = errors.New("snapshot not found")

// Snapshot is one snapshot's record. Its JSON shape is the one snapshot.json had, which
// Open moves into the store.
type Snapshot struct {
	ID         string `json:"id"`
	Name       string `json:"name,omitempty"`
	TeamID     string `json:"teamId"`
	SandboxID  string `json:"sandboxId"`  // the sandbox it was taken of
	TemplateID string `json:"templateId"` // that sandbox's template: the lower layer
	// Runtime is the engine the sandbox ran on: sandboxes from the snapshot restore on it.
	Runtime  string            `json:"runtime,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
	// Secure and EnvdAccessToken are the sandbox's: envd's memory, restored, keeps the token.
	Secure          bool      `json:"secure"`
	EnvdAccessToken string    `json:"envdAccessToken,omitempty"`
	CreatedAt       time.Time `json:"createdAt"`
	Bytes           int64     `json:"bytes"` // on disk
	// Network and Inbound are the sandbox's network config, which sandboxes started from
	// the snapshot get (each in a namespace and address of its own). Nil: it had no network.
	Network *egress.Policy  `json:"network,omitempty"`
	Inbound network.Inbound `json:"inbound,omitzero"`
	// Volumes are the volumes the sandbox mounted: sandboxes started from the snapshot mount
	// them again, as they are then (a volume is not part of the snapshot).
	Volumes []VolumeMount `json:"volumes,omitempty"`
}

// VolumeMount is a volume mounted at a path in a sandbox, by the volume's id.
type VolumeMount struct {
	VolumeID string `json:"volumeId"`
	Path     string `json:"path"`
	ReadOnly bool   `json:"readOnly,omitempty"`
}

// Store is the snapshots whose files are under one directory of one node, their records in
// a store.
type Store struct {
	dir  string
	db   store.Snapshots
	node string
}

// Open returns the store of node's snapshots in dir, making it. Records an older release
// left as snapshot.json files are moved into db; what a crash left half made (a fork's
// export, a snapshot without its record) is removed: call it before anything uses the store.
func Open(ctx context.Context, dir string, db store.Snapshots, node string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("snapshots: %w", err)
	}
	s := &Store{dir: dir, db: db, node: node}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("snapshots: %w", err)
	}
	for _, e := range entries {
		if e.IsDir() && IsID(e.Name()) {
			if err := s.moveLegacy(ctx, e.Name()); err != nil {
				return nil, err
			}
		}
	}
	recorded, err := db.ListSnapshots(ctx, store.SnapshotFilter{Node: node})
	if err != nil {
		return nil, fmt.Errorf("snapshots: %w", err)
	}
	kept := map[string]bool{}
	for _, sn := range recorded {
		if _, err := os.Stat(s.Dir(sn.ID)); errors.Is(err, os.ErrNotExist) {
			// Its files are gone (a delete cut short removes the record first, so this is
			// someone else's doing): a record without them would start nothing.
			if err := db.DeleteSnapshot(ctx, sn.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
				return nil, fmt.Errorf("snapshots: %w", err)
			}
			continue
		}
		kept[sn.ID] = true
	}
	for _, e := range entries {
		if !e.IsDir() || kept[e.Name()] {
			continue
		}
		if _, err := db.GetSnapshot(ctx, e.Name()); !errors.Is(err, store.ErrNotFound) {
			// Recorded under another node name (this data dir's server was renamed), or the
			// store cannot say: not provably half made, so kept.
			continue
		}
		_ = os.RemoveAll(filepath.Join(dir, e.Name()))
	}
	return s, nil
}

// legacyRecord is the file an older release kept each snapshot's record in.
const legacyRecord = "snapshot.json"

// moveLegacy moves snapshot id's snapshot.json into the store, then removes the file. A
// record already there is an earlier start's that stopped before removing the file: the
// file is only removed.
func (s *Store) moveLegacy(ctx context.Context, id string) error {
	path := filepath.Join(s.Dir(id), legacyRecord)
	_ = os.Remove(path + ".tmp") // a write a crash interrupted: the snapshot was never made
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("snapshots: %w", err)
	}
	if _, err := s.db.GetSnapshot(ctx, id); errors.Is(err, store.ErrNotFound) {
		var sn Snapshot
		if err := json.Unmarshal(b, &sn); err != nil || sn.ID != id {
			return fmt.Errorf("snapshots: %s does not read as snapshot %s's record (%v): move it away to start", path, id, err)
		}
		rec, err := s.toRecord(&sn)
		if err != nil {
			return err
		}
		if err := s.db.InsertSnapshot(ctx, rec); err != nil {
			return fmt.Errorf("snapshots: move %s into the store: %w", path, err)
		}
	} else if err != nil {
		return fmt.Errorf("snapshots: %w", err)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("snapshots: remove %s after moving it into the store: %w", path, err)
	}
	return nil
}

var validID = regexp.MustCompile(`^snap-[0-9a-f]{16}$`)

// IsID reports whether s has the form of a snapshot id (snap- and 16 hex digits).
func IsID(s string) bool { return validID.MatchString(s) }

// NewID mints a snapshot id.
func NewID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "snap-" + hex.EncodeToString(b)
}

// Dir is where snapshot id's files live (the runtime exports into it).
func (s *Store) Dir(id string) string { return filepath.Join(s.dir, id) }

// TempDir returns a new path under the store (not created) for a short-lived export: a
// fork's source. RemoveAll it when done.
func (s *Store) TempDir() string { return filepath.Join(s.dir, ".fork-"+NewID()[5:]) }

// config is the part of a snapshot's record the store keeps sealed: the envd token, the
// network config (a traffic token, an egress proxy's password) and, with them, the volumes.
type config struct {
	Secure          bool            `json:"secure,omitempty"`
	EnvdAccessToken string          `json:"envdAccessToken,omitempty"`
	Network         *egress.Policy  `json:"network,omitempty"`
	Inbound         network.Inbound `json:"inbound,omitzero"`
	Volumes         []VolumeMount   `json:"volumes,omitempty"`
}

func (s *Store) toRecord(sn *Snapshot) (*store.Snapshot, error) {
	b, err := json.Marshal(config{Secure: sn.Secure, EnvdAccessToken: sn.EnvdAccessToken, Network: sn.Network, Inbound: sn.Inbound, Volumes: sn.Volumes})
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", sn.ID, err)
	}
	return &store.Snapshot{ID: sn.ID, Node: s.node, TeamID: sn.TeamID, Name: sn.Name, SandboxID: sn.SandboxID, TemplateID: sn.TemplateID,
		Runtime: sn.Runtime, Metadata: sn.Metadata, CreatedAt: sn.CreatedAt, Bytes: sn.Bytes, Config: b}, nil
}

func fromRecord(r *store.Snapshot) (*Snapshot, error) {
	var c config
	if len(r.Config) > 0 {
		if err := json.Unmarshal(r.Config, &c); err != nil {
			return nil, fmt.Errorf("snapshot %s: %w", r.ID, err)
		}
	}
	return &Snapshot{ID: r.ID, Name: r.Name, TeamID: r.TeamID, SandboxID: r.SandboxID, TemplateID: r.TemplateID, Runtime: r.Runtime,
		Metadata: r.Metadata, Secure: c.Secure, EnvdAccessToken: c.EnvdAccessToken, CreatedAt: r.CreatedAt, Bytes: r.Bytes,
		Network: c.Network, Inbound: c.Inbound, Volumes: c.Volumes}, nil
}

// The methods below keep the signatures the orchestrator calls them by (no context): a
// record is one local query, and the callers' contexts are theirs to thread through later.

// Save stores sn's record, its directory made by the runtime's export: the snapshot exists
// from here on.
func (s *Store) Save(sn *Snapshot) error {
	rec, err := s.toRecord(sn)
	if err != nil {
		return err
	}
	if err := s.db.InsertSnapshot(context.Background(), rec); err != nil {
		return fmt.Errorf("save snapshot %s: %w", sn.ID, err)
	}
	return nil
}

// Get returns snapshot id; ErrNotFound when there is none, or its files are on another node.
func (s *Store) Get(id string) (*Snapshot, error) {
	if !IsID(id) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	rec, err := s.db.GetSnapshot(context.Background(), id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && rec.Node != s.node) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", id, err)
	}
	return fromRecord(rec)
}

// Shared returns snapshot id whose files are on another node of the cluster, and that node:
// a node can start copies of it from the object store's copy of its files. ErrNotFound when
// there is none, or it is this node's.
func (s *Store) Shared(id string) (*Snapshot, string, error) {
	if !IsID(id) {
		return nil, "", fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	rec, err := s.db.GetSnapshot(context.Background(), id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && rec.Node == s.node) {
		return nil, "", fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return nil, "", fmt.Errorf("snapshot %s: %w", id, err)
	}
	sn, err := fromRecord(rec)
	return sn, rec.Node, err
}

// ForgetShared deletes the record of snapshot id whose files are on another node, one that
// is lost: that node removes the files when it starts again (Open keeps no directory without
// a record). ErrNotFound when there is none, or it is this node's.
func (s *Store) ForgetShared(id string) error {
	if _, _, err := s.Shared(id); err != nil {
		return err
	}
	if err := s.db.DeleteSnapshot(context.Background(), id); errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%w: %s", ErrNotFound, id)
	} else if err != nil {
		return fmt.Errorf("delete snapshot %s: %w", id, err)
	}
	return nil
}

// Filter selects snapshots; empty fields match all.
type Filter struct {
	TeamID, SandboxID, Name string
	// AllNodes lists every node's snapshots, not only this node's (the API's listing on a
	// cluster: one API from any node).
	AllNodes bool
}

// List returns this node's snapshots that match f, newest first.
func (s *Store) List(f Filter) ([]*Snapshot, error) {
	recs, err := s.db.ListSnapshots(context.Background(), store.SnapshotFilter{Node: s.node, TeamID: f.TeamID, SandboxID: f.SandboxID, Name: f.Name, AllNodes: f.AllNodes})
	if err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	var out []*Snapshot
	for _, r := range recs {
		sn, err := fromRecord(r)
		if err != nil {
			return nil, fmt.Errorf("list snapshots: %w", err)
		}
		out = append(out, sn)
	}
	return out, nil
}

// Delete removes snapshot id and its files.
func (s *Store) Delete(id string) error {
	if _, err := s.Get(id); err != nil {
		return err
	}
	// The record first: a delete cut short leaves a half-made snapshot, which the next Open
	// removes, never a listed one without its files.
	if err := s.db.DeleteSnapshot(context.Background(), id); errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%w: %s", ErrNotFound, id)
	} else if err != nil {
		return fmt.Errorf("delete snapshot %s: %w", id, err)
	}
	if err := os.RemoveAll(s.Dir(id)); err != nil {
		return fmt.Errorf("delete snapshot %s: %w", id, err)
	}
	return nil
}
