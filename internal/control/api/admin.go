package api

import (
	"context"
	"crypto/subtle"
	"fmt"
	"net/http"

	"github.com/cove-dev/cove/internal/httpx"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/sdk/reason"
)

// HeaderAdminToken carries the operator's admin token (the data dir's admin-token file).
const HeaderAdminToken = "X-Admin-Token"

// handleAdmin declares a route behind the admin token.
func (a *api) handleAdmin(pattern string, h httpx.Handler) {
	a.table = append(a.table, httpx.Route{Pattern: pattern, Auth: httpx.AuthAdmin, Handler: h})
}

// authenticateAdmin checks the admin token; without a configured token every admin route is
// not found, so a server without one offers no admin surface at all.
func (a *api) authenticateAdmin(r *http.Request) (context.Context, error) {
	if a.cfg.AdminToken == "" {
		return nil, errNoRoute(r)
	}
	got := r.Header.Get(HeaderAdminToken)
	if subtle.ConstantTimeCompare([]byte(got), []byte(a.cfg.AdminToken)) != 1 {
		return nil, fmt.Errorf("%w: admin routes need the %s header", errUnauthorized, HeaderAdminToken)
	}
	return telemetry.With(r.Context(), telemetry.KeyCaller, "admin"), nil
}

// adminKill kills any team's sandbox with reason admin.
func (a *api) adminKill(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	telemetry.Logger(r.Context()).Info("sandbox kill requested", telemetry.KeyKillReason, reason.KillAdmin.String())
	if err := a.cfg.Sandboxes.Kill(r.Context(), "", id, reason.KillAdmin, ""); err != nil {
		return fmt.Errorf("admin kill %s: %w", id, err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
