package store

import (
	"context"
	"time"
)

// Snapshot is a sandbox snapshot's record (internal/control/snapshot shapes it). The snapshot's files
// (the runtime's export) stay on the disk of the node that took it: Node says which.
type Snapshot struct {
	ID         string
	Node       string // the cluster node that holds its files; "" on a server of one box
	TeamID     string
	Name       string
	SandboxID  string // the sandbox it was taken of
	TemplateID string
	Runtime    string
	Metadata   map[string]string
	CreatedAt  time.Time
	Bytes      int64 // its files on disk
	// Config is the rest of the caller's record, as JSON the caller shapes: the envd access
	// token, the network config with its traffic token, the volumes. It holds secrets, so the
	// store keeps it sealed (SnapshotSealName) when it has a sealer.
	Config []byte
}

// SnapshotFilter selects snapshots: Node always (unless AllNodes), the other fields when not "".
type SnapshotFilter struct {
	Node, TeamID, SandboxID, Name string
	// AllNodes selects every node's snapshots, not Node's: a cluster's listing through any node.
	AllNodes bool
}

// Snapshots stores snapshot records.
type Snapshots interface {
	// InsertSnapshot stores a new record; ErrConflict when one has its id.
	InsertSnapshot(ctx context.Context, sn *Snapshot) error
	// GetSnapshot returns snapshot id, of whichever node; ErrNotFound when there is none.
	GetSnapshot(ctx context.Context, id string) (*Snapshot, error)
	// ListSnapshots returns the snapshots f selects, newest first.
	ListSnapshots(ctx context.Context, f SnapshotFilter) ([]*Snapshot, error)
	// DeleteSnapshot removes snapshot id's record; ErrNotFound when there is none.
	DeleteSnapshot(ctx context.Context, id string) error
}

// SnapshotSealName is the name a snapshot's Config is sealed under: a sealed value copied
// to another row does not open.
func SnapshotSealName(id string) string { return "snapshot-config-" + id }

// Records is the records of what a node keeps on its own disk or host: snapshots, volumes
// and their leases, network allocations.
type Records interface {
	Snapshots
	Volumes
	NetworkRecords
}
