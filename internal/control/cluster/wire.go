package cluster

import (
	"context"
	"errors"
	"fmt"

	"github.com/cove-dev/cove/internal/errdefs"
	"github.com/cove-dev/cove/internal/store"
	cove "github.com/cove-dev/cove/sdk"
)

// Wire is a node as the API answers it (the SDK's type).
func Wire(n *store.Node) cove.Node {
	return cove.Node{Name: n.Name, AdvertiseURL: n.AdvertiseURL, State: string(n.State), VCPUs: n.VCPUs, MemoryMB: n.MemoryMB,
		DiskMB: n.DiskMB, MaxSandboxes: n.MaxSandboxes, MaxStarts: n.MaxStarts, UsedVCPUs: n.UsedVCPUs, UsedMemoryMB: n.UsedMemoryMB,
		Sandboxes: n.UsedSandboxes, Starting: n.Starting, Templates: n.Templates, Version: n.Version, RegisteredAt: n.RegisteredAt,
		HeartbeatAt: n.HeartbeatAt, LeaseUntil: n.LeaseUntil, LostAt: n.LostAt}
}

// SetState moves node name to state (an operator's drain or activate) and returns it: only
// an active or draining node can be moved; an unknown one is not found, naming it.
func SetState(ctx context.Context, nodes store.Nodes, name string, state store.NodeState) (*store.Node, error) {
	n, err := nodes.GetNode(ctx, name)
	if err == nil && (n.State == store.NodeLost || n.State == store.NodeLeft) {
		err = errdefs.New(errdefs.ErrFailedPrecondition, fmt.Sprintf("node %s is %s: only an active or draining node can be %s", name, n.State, state))
	}
	if err == nil {
		err = nodes.SetNodeState(ctx, name, state)
	}
	if err == nil {
		n, err = nodes.GetNode(ctx, name)
	}
	if errors.Is(err, store.ErrNotFound) {
		err = errdefs.New(errdefs.ErrNotFound, fmt.Sprintf("node %s: no such node", name))
	}
	return n, err
}
