package console

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/cove-dev/cove/internal/store"
)

// nodeRow is a node with its use as shares of its capacity, for the page's bars.
type nodeRow struct {
	*store.Node
	SandboxPct, VCPUPct, MemoryPct float64
}

func pct(used, of int64) float64 {
	if of <= 0 {
		return 0
	}
	return min(100, 100*float64(used)/float64(of))
}

// nodesPage shows the cluster's nodes to the admin: state, what placement reserved against
// each one's capacity, templates cached, last heartbeat, and when a lost one was declared lost.
func (c *Console) nodesPage(w http.ResponseWriter, r *http.Request) {
	if !sessionOf(r).admin() {
		c.fail(w, r, http.StatusForbidden, errors.New("nodes: sign in with the admin token to see the cluster's nodes"))
		return
	}
	if c.cfg.Nodes == nil {
		c.fail(w, r, http.StatusNotFound, errors.New("nodes: this server is no cluster node (start it with --node and a shared --state)"))
		return
	}
	nodes, err := c.cfg.Nodes.ListNodes(r.Context())
	if err != nil {
		c.fail(w, r, http.StatusInternalServerError, fmt.Errorf("nodes: %w", err))
		return
	}
	rows := make([]nodeRow, 0, len(nodes))
	for _, n := range nodes {
		rows = append(rows, nodeRow{Node: n, SandboxPct: pct(int64(n.UsedSandboxes), int64(n.MaxSandboxes)),
			VCPUPct: pct(int64(n.UsedVCPUs), int64(n.VCPUs)), MemoryPct: pct(n.UsedMemoryMB, n.MemoryMB)})
	}
	c.render(w, r, "nodes.html", map[string]any{"Title": "Nodes", "Nodes": rows})
}
