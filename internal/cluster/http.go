package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/cove-dev/cove/internal/errdefs"
	"github.com/cove-dev/cove/internal/httpx"
	"github.com/cove-dev/cove/internal/store"
	cove "github.com/cove-dev/cove/sdk"
)

// AdminRoutes are the cluster's operator routes, served behind the API's admin token:
// GET /admin/nodes, POST /admin/nodes/{name}/drain and /activate.
func AdminRoutes(nodes store.Nodes) map[string]http.Handler {
	return map[string]http.Handler{
		"GET /admin/nodes":                  http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { listNodes(w, r, nodes) }),
		"POST /admin/nodes/{name}/drain":    setState(nodes, store.NodeDraining),
		"POST /admin/nodes/{name}/activate": setState(nodes, store.NodeActive),
	}
}

// Wire is a node as the API answers it (the SDK's type).
func Wire(n *store.Node) cove.Node {
	return cove.Node{Name: n.Name, AdvertiseURL: n.AdvertiseURL, State: string(n.State), VCPUs: n.VCPUs, MemoryMB: n.MemoryMB,
		DiskMB: n.DiskMB, MaxSandboxes: n.MaxSandboxes, MaxStarts: n.MaxStarts, UsedVCPUs: n.UsedVCPUs, UsedMemoryMB: n.UsedMemoryMB,
		Sandboxes: n.UsedSandboxes, Starting: n.Starting, Templates: n.Templates, Version: n.Version, RegisteredAt: n.RegisteredAt,
		HeartbeatAt: n.HeartbeatAt, LeaseUntil: n.LeaseUntil, LostAt: n.LostAt}
}

func listNodes(w http.ResponseWriter, r *http.Request, nodes store.Nodes) {
	all, err := nodes.ListNodes(r.Context())
	if err != nil {
		httpx.WriteError(r.Context(), w, fmt.Errorf("list nodes: %w", err))
		return
	}
	out := make([]cove.Node, 0, len(all))
	for _, n := range all {
		out = append(out, Wire(n))
	}
	writeJSON(w, out)
}

func setState(nodes store.Nodes, state store.NodeState) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		n, err := nodes.GetNode(r.Context(), name)
		if err == nil && (n.State == store.NodeLost || n.State == store.NodeLeft) {
			err = errdefs.New(errdefs.ErrFailedPrecondition, fmt.Sprintf("node %s is %s: only an active or draining node can be %s", name, n.State, state))
		}
		if err == nil {
			err = nodes.SetNodeState(r.Context(), name, state)
		}
		if err == nil {
			n, err = nodes.GetNode(r.Context(), name)
		}
		if errors.Is(err, store.ErrNotFound) {
			err = errdefs.New(errdefs.ErrNotFound, fmt.Sprintf("node %s: no such node", name))
		}
		if err != nil {
			httpx.WriteError(r.Context(), w, err)
			return
		}
		writeJSON(w, Wire(n))
	})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
