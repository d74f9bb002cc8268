package teamroutes

import (
	"fmt"
	"net/http"

	"github.com/cove-dev/cove/internal/httpx"
	"github.com/cove-dev/cove/internal/observe/trace"
)

// traceRoutes serve GET /traces/{requestId}: the caller's team's timeline for that id.
func traceRoutes(cfg Config) []httpx.Route {
	return []httpx.Route{route("GET /traces/{requestId}", func(w http.ResponseWriter, r *http.Request, team string) error {
		tl, err := trace.Build(r.Context(), cfg.Traces, team, r.PathValue("requestId"))
		if err != nil {
			return fmt.Errorf("trace: %w", err)
		}
		writeJSON(w, http.StatusOK, tl)
		return nil
	})}
}
