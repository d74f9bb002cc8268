package store

import (
	"context"
	"time"
)

// Volume is a team's volume's record (internal/control/snapshot shapes it). Its live files are on
// the disk of one node, Node; in a cluster a volume no node holds ("" there) is its image in
// the object store at Version, which the next node to mount it fetches.
type Volume struct {
	ID     string
	Node   string // the node that holds its live files; "" on a server of one box, or released to the object store
	TeamID string
	Name   string // unique per node and team
	// Token authenticates E2B's volume content API: kept sealed (VolumeSealName) when the
	// store has a sealer.
	Token     string
	CreatedAt time.Time
	SizeBytes int64 // its quota; 0 for a plain directory
	// Version is the volume's image in the object store that is current when no node holds
	// it (0: never published); UsedBytes what its files took then.
	Version, UsedBytes int64
}

// AllNodes, as ListVolumes's node, lists the volumes of every node and those no node holds.
const AllNodes = "*"

// VolumeLease is how one sandbox mounts one volume: a lease lasts while its sandbox does,
// which only the orchestrator can tell, so the store keeps leases until they are deleted.
type VolumeLease struct {
	VolumeID  string
	SandboxID string
	ReadOnly  bool     // false if any of its mounts is read-write
	Paths     []string // where the sandbox mounts it, in the order claimed
}

// Volumes stores volume records and their leases.
type Volumes interface {
	// InsertVolume stores a new record; ErrConflict when one has its id, or the team has a
	// volume of that name on that node.
	InsertVolume(ctx context.Context, v *Volume) error
	// GetVolume returns volume id, of whichever node and team; ErrNotFound when none.
	GetVolume(ctx context.Context, id string) (*Volume, error)
	// ListVolumes returns node's volumes (every node's when AllNodes) of teamID (of every
	// team when ""), oldest first.
	ListVolumes(ctx context.Context, node, teamID string) ([]*Volume, error)
	// MoveVolume hands volume id from node from to node to (either "": no node), setting its
	// current Version and UsedBytes: ErrConflict when from does not hold it (another node
	// took it first), ErrNotFound when there is no such volume. It is what keeps two nodes
	// from holding one volume at once.
	MoveVolume(ctx context.Context, id, from, to string, version, usedBytes int64) error
	// DeleteVolume removes volume id's record and its leases; ErrNotFound when none.
	DeleteVolume(ctx context.Context, id string) error
	// PutVolumeLease stores l, replacing the lease of its sandbox on its volume; ErrNotFound
	// when the volume has no record.
	PutVolumeLease(ctx context.Context, l *VolumeLease) error
	// VolumeLeases returns volume id's leases, by sandbox id.
	VolumeLeases(ctx context.Context, volumeID string) ([]*VolumeLease, error)
	// DeleteVolumeLease removes a sandbox's lease on a volume; none is no error.
	DeleteVolumeLease(ctx context.Context, volumeID, sandboxID string) error
}

// VolumeSealName is the name a volume's token is sealed under.
func VolumeSealName(id string) string { return "volume-token-" + id }
