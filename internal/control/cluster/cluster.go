// Package cluster makes cove servers one fleet: each node registers in the shared store with
// its capacity and renews a lease (Member), any node marks a node whose lease lapsed as lost
// and hands its sandboxes to the one kill path (Sweeper), and a create picks a node by free
// capacity and template cache and reserves room on it atomically (Place).
//
// The one idea: the database is the only arbiter. A reservation, a lease renewal and a
// declaration of loss are each one transaction on the shared store (store.Nodes), so racing
// nodes never overcommit a node or a team, and a node the cluster declared lost learns it at
// its next renewal and kills what it still runs itself.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sort"
	"time"

	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/store"
)

// Member keeps one node registered: it renews the node's lease every Interval (the lease
// lasts LeaseFor), and calls OnLost once if the cluster declared the node lost meanwhile.
type Member struct {
	Store     store.Nodes
	Node      store.Node
	Interval  time.Duration // between renewals; 2 s when 0
	LeaseFor  time.Duration // a lease's length; 5 × Interval when 0
	Templates func() []string
	// OnLost runs when a renewal finds the node declared lost: the node must kill every
	// sandbox it still runs (reason node_lost), then it registers again.
	OnLost func(ctx context.Context, lostAt time.Time)
	Logger *slog.Logger
}

func (m *Member) interval() time.Duration {
	if m.Interval <= 0 {
		return 2 * time.Second
	}
	return m.Interval
}

func (m *Member) lease() time.Duration {
	if m.LeaseFor <= 0 {
		return 5 * m.interval()
	}
	return m.LeaseFor
}

// Register registers the node once, before it serves.
func (m *Member) Register(ctx context.Context) error {
	n := m.Node
	if m.Templates != nil {
		n.Templates = m.Templates()
	}
	if err := m.Store.RegisterNode(ctx, &n, m.lease()); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	return nil
}

// Run renews the lease until ctx ends.
func (m *Member) Run(ctx context.Context) {
	t := time.NewTicker(m.interval())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var templates []string
		if m.Templates != nil {
			templates = m.Templates()
		}
		_, err := m.Store.RenewLease(ctx, m.Node.Name, m.lease(), templates)
		switch {
		case errors.Is(err, store.ErrNodeLost):
			n, gerr := m.Store.GetNode(ctx, m.Node.Name)
			lostAt := time.Now()
			if gerr == nil && n.LostAt != nil {
				lostAt = *n.LostAt
			}
			m.logger().Warn("node declared lost", telemetry.KeyNode, m.Node.Name, telemetry.KeyNodeLostAt, lostAt)
			if m.OnLost != nil {
				m.OnLost(ctx, lostAt)
			}
			if err := m.Register(ctx); err != nil {
				m.logger().Error("node not registered again", telemetry.KeyNode, m.Node.Name, telemetry.KeyError, err)
			}
		case err != nil && ctx.Err() == nil:
			m.logger().Warn("lease not renewed", telemetry.KeyNode, m.Node.Name, telemetry.KeyError, err)
		}
	}
}

func (m *Member) logger() *slog.Logger {
	if m.Logger != nil {
		return m.Logger
	}
	return slog.Default()
}

// Sweeper marks lapsed nodes lost and hands each one's sandboxes to OnNodeLost, which ends
// them (reason node_lost); their reservations are then given back.
type Sweeper struct {
	Store    store.Nodes
	Interval time.Duration // 2 s when 0
	// OnNodeLost ends the sandboxes a lost node held; the sweeper releases their
	// reservations once it returns.
	OnNodeLost func(ctx context.Context, node *store.Node, sandboxes []*store.Reservation)
	Logger     *slog.Logger
	Now        func() time.Time
}

// Sweep marks the nodes whose lease lapsed as lost, once, and returns them.
func (s *Sweeper) Sweep(ctx context.Context) ([]*store.Node, error) {
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	lost, err := s.Store.MarkLostNodes(ctx, now())
	if err != nil {
		return nil, fmt.Errorf("cluster: sweep: %w", err)
	}
	for _, n := range lost {
		held, err := s.Store.PlacementsOn(ctx, n.Name)
		if err != nil {
			return lost, fmt.Errorf("cluster: sweep: %w", err)
		}
		if s.Logger != nil {
			s.Logger.Warn("node lost", telemetry.KeyNode, n.Name, telemetry.KeyNodeHeartbeat, n.HeartbeatAt, telemetry.KeyNodeSandboxes, len(held))
		}
		if s.OnNodeLost != nil {
			s.OnNodeLost(ctx, n, held)
		}
		for _, r := range held {
			if err := s.Store.Release(ctx, r.SandboxID); err != nil {
				return lost, fmt.Errorf("cluster: sweep: %w", err)
			}
		}
	}
	return lost, nil
}

// Run sweeps until ctx ends.
func (s *Sweeper) Run(ctx context.Context) {
	iv := s.Interval
	if iv <= 0 {
		iv = 2 * time.Second
	}
	t := time.NewTicker(iv)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := s.Sweep(ctx); err != nil && ctx.Err() == nil && s.Logger != nil {
			s.Logger.Warn("sweep failed", telemetry.KeyError, err)
		}
	}
}

// Request is what a create needs of a node.
type Request struct {
	SandboxID string
	TeamID    string
	Template  string
	VCPUs     int
	MemoryMB  int64
	Limits    store.TeamLimits
}

// ErrNoNode: no node has room for the request.
var ErrNoNode = fmt.Errorf("no node has room: %w", store.ErrNodeFull)

// K is how many candidate nodes a placement samples (best of K).
const K = 3

// Place picks a node for r and reserves room on it: it samples K active nodes with room,
// best first by free share of memory and vCPUs, a node that caches r.Template ahead of one
// that does not; a reservation another create beat it to moves on to the next. A team over
// its limits is ErrTeamQuota at once.
func Place(ctx context.Context, nodes store.Nodes, r Request, rnd *rand.Rand) (string, error) {
	all, err := nodes.ListNodes(ctx)
	if err != nil {
		return "", fmt.Errorf("cluster: place: %w", err)
	}
	for _, n := range Rank(all, r, rnd) {
		err := nodes.Reserve(ctx, store.Reservation{SandboxID: r.SandboxID, Node: n.Name, TeamID: r.TeamID, VCPUs: r.VCPUs, MemoryMB: r.MemoryMB}, r.Limits)
		switch {
		case err == nil:
			return n.Name, nil
		case errors.Is(err, store.ErrNodeFull):
			continue
		default:
			return "", err
		}
	}
	return "", ErrNoNode
}

// Rank orders the active nodes with room for r as a placement tries them: the best of K
// sampled nodes by score first, then the rest in a random order as fallbacks. rnd nil
// seeds one.
func Rank(all []*store.Node, r Request, rnd *rand.Rand) []*store.Node {
	var fit []*store.Node
	for _, n := range all {
		if n.State == store.NodeActive && n.UsedVCPUs+r.VCPUs <= n.VCPUs && n.UsedMemoryMB+r.MemoryMB <= n.MemoryMB &&
			n.UsedSandboxes < n.MaxSandboxes && n.Starting < n.MaxStarts {
			fit = append(fit, n)
		}
	}
	if rnd == nil {
		rnd = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	rnd.Shuffle(len(fit), func(i, j int) { fit[i], fit[j] = fit[j], fit[i] })
	head := fit[:min(K, len(fit))]
	sort.SliceStable(head, func(i, j int) bool { return score(head[i], r) > score(head[j], r) })
	return fit
}

// score is how good a home n is for r: its free share of memory and vCPUs after r, plus one
// when it caches r's template (a start without a download).
func score(n *store.Node, r Request) float64 {
	s := 0.0
	if n.MemoryMB > 0 {
		s += float64(n.MemoryMB-n.UsedMemoryMB-r.MemoryMB) / float64(n.MemoryMB)
	}
	if n.VCPUs > 0 {
		s += float64(n.VCPUs-n.UsedVCPUs-r.VCPUs) / float64(n.VCPUs)
	}
	if r.Template != "" && slices.Contains(n.Templates, r.Template) {
		s++
	}
	return s
}
