// Package adminroutes is the operator's REST routes served behind the API's admin token:
// the retention status and a cluster's nodes (list, drain, activate). One route table
// (Routes), served by the API through the one chain (httpx.Chain).
//
// The one idea: a route translates between the wire and a domain package (retention,
// cluster), which knows nothing of HTTP.
//
// It must not import the orchestrator, the API's own package, the proxy or server.
package adminroutes

import (
	"context"
	"fmt"
	"net/http"

	"github.com/cove-dev/cove/internal/control/cluster"
	"github.com/cove-dev/cove/internal/httpx"
	"github.com/cove-dev/cove/internal/observe/retention"
	"github.com/cove-dev/cove/internal/store"
	cove "github.com/cove-dev/cove/sdk"
)

// Config is what the admin routes read; a nil field leaves its routes out.
type Config struct {
	// Status is every dataset's retention status (retention.Retainer.Status).
	Status func(ctx context.Context) ([]retention.Status, error)
	// Nodes are a cluster's nodes.
	Nodes store.Nodes
}

// Routes is the admin routes' table: every route wants the admin token (httpx.AuthAdmin).
//
//	GET  /admin/status                   every dataset's retention status
//	GET  /admin/nodes                    the cluster's nodes, as the SDK reads them
//	POST /admin/nodes/{name}/drain       stop placing sandboxes on a node, move its own away
//	POST /admin/nodes/{name}/activate    undo a drain
func Routes(cfg Config) []httpx.Route {
	var routes []httpx.Route
	if cfg.Status != nil {
		routes = append(routes, admin("GET /admin/status", func(w http.ResponseWriter, r *http.Request) error {
			st, err := cfg.Status(r.Context())
			if err != nil {
				return fmt.Errorf("retention status: %w", err)
			}
			httpx.WriteJSON(w, http.StatusOK, st)
			return nil
		}))
	}
	if cfg.Nodes != nil {
		routes = append(routes,
			admin("GET /admin/nodes", func(w http.ResponseWriter, r *http.Request) error {
				all, err := cfg.Nodes.ListNodes(r.Context())
				if err != nil {
					return fmt.Errorf("list nodes: %w", err)
				}
				out := make([]cove.Node, 0, len(all))
				for _, n := range all {
					out = append(out, cluster.Wire(n))
				}
				httpx.WriteJSON(w, http.StatusOK, out)
				return nil
			}),
			admin("POST /admin/nodes/{name}/drain", setState(cfg.Nodes, store.NodeDraining)),
			admin("POST /admin/nodes/{name}/activate", setState(cfg.Nodes, store.NodeActive)))
	}
	return routes
}

func admin(pattern string, h httpx.Handler) httpx.Route {
	return httpx.Route{Pattern: pattern, Auth: httpx.AuthAdmin, Handler: h}
}

func setState(nodes store.Nodes, state store.NodeState) httpx.Handler {
	return func(w http.ResponseWriter, r *http.Request) error {
		n, err := cluster.SetState(r.Context(), nodes, r.PathValue("name"), state)
		if err != nil {
			return err
		}
		httpx.WriteJSON(w, http.StatusOK, cluster.Wire(n))
		return nil
	}
}
