// Package snapshot keeps sandbox snapshots on disk: a sandbox's processes, memory and files,
// checkpointed and exported, to start new sandboxes from (Sandbox.create(snapshotId)).
//
// The one idea: a snapshot is a directory, <dir>/<id>/, holding the runtime's export
// (checkpoint/ and upper/) and snapshot.json, written last, so a snapshot without its json
// is half made and never listed.
package snapshot

import (
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
	"time"

	"github.com/cove-dev/cove/internal/network"
)

// ErrNotFound: no such snapshot.
var ErrNotFound = errors.New("snapshot not found")

// Snapshot is one snapshot's record.
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
	Network *network.Policy `json:"network,omitempty"`
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

// Store is the snapshots under one directory.
type Store struct{ dir string }

// Open returns the store in dir, making it. What a crash left half made (a fork's export, a
// snapshot without its record) is removed: call it before anything uses the store.
func Open(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("snapshots: %w", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("snapshots: %w", err)
	}
	for _, e := range entries {
		if _, err := os.Stat(filepath.Join(dir, e.Name(), recordFile)); e.IsDir() && err != nil {
			_ = os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
	return &Store{dir: dir}, nil
}

const recordFile = "snapshot.json"

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

// Save writes sn's record into its directory, which the runtime's export made: the
// snapshot exists from here on.
func (s *Store) Save(sn *Snapshot) error {
	b, err := json.MarshalIndent(sn, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(s.Dir(sn.ID), recordFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("save snapshot %s: %w", sn.ID, err)
	}
	if err := os.Rename(tmp, filepath.Join(s.Dir(sn.ID), recordFile)); err != nil {
		return fmt.Errorf("save snapshot %s: %w", sn.ID, err)
	}
	return nil
}

// Get returns snapshot id; ErrNotFound when there is none (or it is half made).
func (s *Store) Get(id string) (*Snapshot, error) {
	if !IsID(id) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	b, err := os.ReadFile(filepath.Join(s.Dir(id), recordFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", id, err)
	}
	var sn Snapshot
	if err := json.Unmarshal(b, &sn); err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", id, err)
	}
	return &sn, nil
}

// Filter selects snapshots; empty fields match all.
type Filter struct {
	TeamID, SandboxID, Name string
}

// List returns the snapshots that match f, newest first.
func (s *Store) List(f Filter) ([]*Snapshot, error) {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	var out []*Snapshot
	for _, e := range entries {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		sn, err := s.Get(e.Name())
		if err != nil {
			continue // half made, or not ours
		}
		if (f.TeamID == "" || sn.TeamID == f.TeamID) && (f.SandboxID == "" || sn.SandboxID == f.SandboxID) && (f.Name == "" || sn.Name == f.Name) {
			out = append(out, sn)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.After(out[j].CreatedAt) })
	return out, nil
}

// Delete removes snapshot id and its files.
func (s *Store) Delete(id string) error {
	if _, err := s.Get(id); err != nil {
		return err
	}
	// The record first: a delete cut short leaves a half-made snapshot, never a listed one
	// without its files.
	if err := os.Remove(filepath.Join(s.Dir(id), recordFile)); err != nil {
		return fmt.Errorf("delete snapshot %s: %w", id, err)
	}
	if err := os.RemoveAll(s.Dir(id)); err != nil {
		return fmt.Errorf("delete snapshot %s: %w", id, err)
	}
	return nil
}
