package store

import (
	"context"
	"fmt"
	"time"

	"github.com/cove-dev/cove/internal/errdefs"
)

// NodeState is where a cluster node stands.
type NodeState string

// Node states.
const (
	NodeActive   NodeState = "active"   // takes new sandboxes
	NodeDraining NodeState = "draining" // takes none; its sandboxes move away
	NodeLost     NodeState = "lost"     // its lease lapsed: its running sandboxes are dead
	NodeLeft     NodeState = "left"     // stopped cleanly
)

// String returns the state's name.
func (s NodeState) String() string {
	if s == "" {
		return "unknown"
	}
	return string(s)
}

// Holds says whether a node in this state runs its sandboxes (active, or draining them away):
// requests for them go there.
func (s NodeState) Holds() bool { return s == NodeActive || s == NodeDraining }

// ParseNodeState reads a state's name; anything else is an error.
func ParseNodeState(s string) (NodeState, error) {
	switch st := NodeState(s); st {
	case NodeActive, NodeDraining, NodeLost, NodeLeft:
		return st, nil
	}
	return "", fmt.Errorf("%w: unknown node state %q", ErrInvalid, s)
}

// Errors callers branch on.
var (
	// ErrNodeFull: the node has no room (capacity, sandbox count or concurrent starts), or it
	// takes no new sandboxes.
	ErrNodeFull = errdefs.New(errdefs.ErrResourceExhausted, "node has no room")
	// ErrTeamQuota: the reservation would pass the team's limits across the cluster.
	ErrTeamQuota = errdefs.New(errdefs.ErrResourceExhausted, "team quota")
	// ErrNodeLost: the cluster declared the node lost; it must kill what it still runs.
	ErrNodeLost = errdefs.New(errdefs.ErrFailedPrecondition, "node declared lost")
)

// Node is one cove server of a cluster: its address, capacity, what placement reserved on
// it, and its lease.
type Node struct {
	Name          string
	AdvertiseURL  string
	State         NodeState
	VCPUs         int
	MemoryMB      int64
	DiskMB        int64
	MaxSandboxes  int
	MaxStarts     int // concurrent starts it takes
	UsedVCPUs     int
	UsedMemoryMB  int64
	UsedSandboxes int
	Starting      int
	Templates     []string // templates cached on the node
	Version       string
	RegisteredAt  time.Time
	HeartbeatAt   time.Time
	LeaseUntil    time.Time
	LostAt        *time.Time
}

// Reservation is what one sandbox holds on its node and against its team's quota.
type Reservation struct {
	SandboxID string
	Node      string
	TeamID    string
	VCPUs     int
	MemoryMB  int64
	Starting  bool // its start is under way: it counts against the node's MaxStarts
	PlacedAt  time.Time
}

// TeamLimits bound what a team holds across the cluster; 0 is no bound.
type TeamLimits struct {
	Sandboxes int
	VCPUs     int
	MemoryMB  int64
}

// Nodes is the cluster's membership and placement ledger. Every change is one transaction,
// so nodes racing on one database never overcommit a node or a team.
type Nodes interface {
	// RegisterNode makes n an active node (or makes it active again after a restart) with a
	// lease of lease from now.
	RegisterNode(ctx context.Context, n *Node, lease time.Duration) error
	// RenewLease extends the node's lease and records the templates it caches; ErrNodeLost
	// when the cluster declared it lost meanwhile, ErrNotFound when it never registered.
	RenewLease(ctx context.Context, name string, lease time.Duration, templates []string) (NodeState, error)
	// SetNodeState moves the node to state (draining, active again, left).
	SetNodeState(ctx context.Context, name string, state NodeState) error
	GetNode(ctx context.Context, name string) (*Node, error)
	ListNodes(ctx context.Context) ([]*Node, error)
	// MarkLostNodes marks every active or draining node whose lease ended before now as
	// lost, and returns those it marked: one caller wins each.
	MarkLostNodes(ctx context.Context, now time.Time) ([]*Node, error)
	// Reserve records r on its node and team when both have room (the node active, under
	// its capacity, sandbox count and concurrent starts; the team under limits), all or none:
	// ErrNodeFull or ErrTeamQuota otherwise. The reservation starts as a start under way.
	Reserve(ctx context.Context, r Reservation, limits TeamLimits) error
	// StartDone ends the start under way of the sandbox's reservation.
	StartDone(ctx context.Context, sandboxID string) error
	// Release gives back what the sandbox reserved; none is not an error.
	Release(ctx context.Context, sandboxID string) error
	// PlacementOf returns where the sandbox is; ErrNotFound when it has no reservation.
	PlacementOf(ctx context.Context, sandboxID string) (*Reservation, error)
	// PlacementsOn lists the reservations on a node.
	PlacementsOn(ctx context.Context, node string) ([]*Reservation, error)
	// MovePlacement moves the sandbox's reservation to node to (a drain's live migration),
	// when to has room: ErrNodeFull otherwise.
	MovePlacement(ctx context.Context, sandboxID, to string) error
}
