package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/telemetry"
	"github.com/cove-dev/cove/reason"
)

// A cluster's node loss, both sides of it (issue 24). The node that notices another's lease
// lapsed declares that node's running sandboxes dead (NodeLost); the lost node, if it comes
// back, learns it at its next renewal and kills what it still runs (Lost). Both go through the
// one kill path with reason node_lost, so the record, the event, the webhook, the counter and
// `cove explain` say the same wherever the sandbox ran.

// Holds says whether this node runs (or is creating) sandbox id: a cluster serves its
// requests here rather than forwarding them.
func (o *Orchestrator) Holds(id string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	_, live := o.live[id]
	_, creating := o.creating[id]
	return live || creating
}

// Placement is the part of the cluster's ledger (store.Nodes) a node's creates use.
type Placement interface {
	// Reserve records r on its node and team when both have room, all or none.
	Reserve(ctx context.Context, r store.Reservation, limits store.TeamLimits) error
	// StartDone ends the start under way of the sandbox's reservation.
	StartDone(ctx context.Context, sandboxID string) error
	// Release gives back what the sandbox reserved.
	Release(ctx context.Context, sandboxID string) error
}

// place reserves sb's room on this node in the cluster's ledger; settle, called once the
// create is over, ends its start (the sandbox went live) or gives the room back (it failed).
func (o *Orchestrator) place(ctx context.Context, sb *store.Sandbox) (settle func(), err error) {
	if o.cfg.Placement == nil {
		return func() {}, nil
	}
	q := o.cfg.Quotas.For(sb.TeamID)
	r := store.Reservation{SandboxID: sb.ID, Node: o.cfg.Node, TeamID: sb.TeamID, VCPUs: sb.CPUCount, MemoryMB: int64(sb.MemoryMB)}
	if err := o.cfg.Placement.Reserve(ctx, r, store.TeamLimits{Sandboxes: q.Sandboxes, VCPUs: q.VCPUs, MemoryMB: int64(q.MemoryMB)}); err != nil {
		telemetry.SandboxCreateFailures.WithLabelValues("placement").Inc()
		if full, ok := ctx.Value(nodeFullKey{}).(*atomic.Bool); ok && errors.Is(err, store.ErrNodeFull) {
			full.Store(true)
		}
		return nil, fmt.Errorf("place sandbox on node %s: %w", o.cfg.Node, err)
	}
	return func() {
		ctx := context.WithoutCancel(ctx)
		o.mu.Lock()
		_, live := o.live[sb.ID]
		o.mu.Unlock()
		var err error
		if live {
			err = o.cfg.Placement.StartDone(ctx, sb.ID)
		} else {
			err = o.cfg.Placement.Release(ctx, sb.ID)
		}
		if err != nil {
			o.logger(ctx).Warn("placement not settled", telemetry.KeySandboxID, sb.ID, telemetry.KeyError, err.Error())
		}
	}, nil
}

type nodeFullKey struct{}

// WatchNodeFull returns a context whose create reports, through full, that this node had no
// room for it (store.ErrNodeFull): the cluster then places the create on another node,
// rather than answer 429 while others have room.
func WatchNodeFull(ctx context.Context) (_ context.Context, full func() bool) {
	var b atomic.Bool
	return context.WithValue(ctx, nodeFullKey{}, &b), b.Load
}

// unplace gives back a killed sandbox's room in the cluster's ledger.
func (o *Orchestrator) unplace(ctx context.Context, id string) {
	if o.cfg.Placement == nil {
		return
	}
	if err := o.cfg.Placement.Release(context.WithoutCancel(ctx), id); err != nil {
		o.logger(ctx).Warn("placement not released", telemetry.KeySandboxID, id, telemetry.KeyError, err.Error())
	}
}

// nodeLostDetail is what a node_lost kill says: the node and its last heartbeat.
func nodeLostDetail(node string, heartbeat time.Time) string {
	return fmt.Sprintf("node %s lost: last heartbeat %s", node, heartbeat.UTC().Format(time.RFC3339Nano))
}

// NodeLost ends every running sandbox the store records on node (another node, whose lease
// lapsed) with reason node_lost, and returns how many it ended. Paused sandboxes stay paused:
// they hold no process on node. The sandboxes are not in this node's memory: each is killed
// from its record, which only marks it dead here (nothing of it runs on this node).
func (o *Orchestrator) NodeLost(ctx context.Context, node string, heartbeat time.Time) (int, error) {
	if node == "" || node == o.cfg.Node {
		return 0, fmt.Errorf("node lost: %q is not another node", node)
	}
	ctx = telemetry.WithRequestID(telemetry.WithLogger(ctx, o.cfg.Logger), SystemRequestID)
	recs, err := o.cfg.Store.LiveSandboxes(ctx)
	if err != nil {
		return 0, fmt.Errorf("node lost: %w", err)
	}
	n := 0
	for _, sb := range recs {
		if sb.Node != node || sb.State != store.StateRunning {
			continue
		}
		e := &entry{sb: sb, closers: map[*closer]struct{}{}, remote: true}
		if err := o.kill(ctx, e, reason.KillNodeLost, "", nodeLostDetail(node, heartbeat)); err != nil {
			o.logger(ctx).Error("node lost: kill sandbox", telemetry.KeySandboxID, sb.ID, telemetry.KeyNode, node, telemetry.KeyError, err.Error())
			continue
		}
		o.closeOpenCommands(ctx, sb.ID, reason.KillNodeLost)
		n++
	}
	return n, nil
}

// Lost kills every sandbox this node still runs with reason node_lost: the cluster declared
// this node lost (its lease lapsed while it was cut off or stalled), so the others already
// count its sandboxes dead and a client may not find them alive here.
func (o *Orchestrator) Lost(ctx context.Context, heartbeat time.Time) {
	ctx = telemetry.WithRequestID(telemetry.WithLogger(ctx, o.cfg.Logger), SystemRequestID)
	for _, e := range o.entries() {
		if e.sb.State != store.StateRunning {
			continue
		}
		_ = o.kill(ctx, e, reason.KillNodeLost, "", nodeLostDetail(o.cfg.Node, heartbeat))
	}
}
