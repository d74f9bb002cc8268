package api

import (
	"crypto/subtle"
	"fmt"
	"net/http"

	"github.com/cove-dev/cove/internal/httpx"
	"github.com/cove-dev/cove/internal/telemetry"
	"github.com/cove-dev/cove/sdk/reason"
)

// HeaderAdminToken carries the operator's admin token (the data dir's admin-token file).
const HeaderAdminToken = "X-Admin-Token"

// handleAdmin registers h behind the admin token; without a configured token the route is
// not found, so a server without one offers no admin surface at all.
func (a *api) handleAdmin(pattern string, h func(w http.ResponseWriter, r *http.Request) error) {
	a.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		if a.cfg.AdminToken == "" {
			a.fail(w, r, errNoRoute(r))
			return
		}
		got := r.Header.Get(HeaderAdminToken)
		if subtle.ConstantTimeCompare([]byte(got), []byte(a.cfg.AdminToken)) != 1 {
			a.fail(w, r, fmt.Errorf("%w: admin routes need the %s header", errUnauthorized, HeaderAdminToken))
			return
		}
		ctx := telemetry.With(r.Context(), telemetry.KeyCaller, "admin")
		if id := r.PathValue("id"); id != "" {
			httpx.NoteFrom(ctx).Add(telemetry.KeySandboxID, id)
			ctx = telemetry.With(ctx, telemetry.KeySandboxID, id)
		}
		if err := h(w, r.WithContext(ctx)); err != nil {
			a.fail(w, r.WithContext(ctx), err)
		}
	})
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
