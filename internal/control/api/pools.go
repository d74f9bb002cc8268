package api

import (
	"context"
	"fmt"
	"net/http"

	"github.com/cove-dev/cove/internal/control/orchestrator"
	cove "github.com/cove-dev/cove/sdk"
)

// Pools sizes and lists the warm pools (the orchestrator's).
type Pools interface {
	SetPoolSize(ctx context.Context, owner, template string, n int) error
	Pools(team string) []orchestrator.PoolStatus
}

func (a *api) routePools() {
	if a.cfg.Pools == nil {
		return
	}
	a.handle("GET /pools", func(w http.ResponseWriter, r *http.Request, c caller) error {
		writeJSON(w, http.StatusOK, poolsJSON(a.cfg.Pools.Pools(c.team.ID)))
		return nil
	})
	a.handle("PUT /templates/{templateID}/pool", func(w http.ResponseWriter, r *http.Request, c caller) error {
		return a.setPool(w, r, c.team.ID)
	})
	a.handleAdmin("GET /admin/pools", func(w http.ResponseWriter, r *http.Request) error {
		writeJSON(w, http.StatusOK, poolsJSON(a.cfg.Pools.Pools("")))
		return nil
	})
	a.handleAdmin("PUT /admin/templates/{templateID}/pool", func(w http.ResponseWriter, r *http.Request) error {
		return a.setPool(w, r, "")
	})
}

// setPool sizes the pool of the path's template for owner ("" the operator).
func (a *api) setPool(w http.ResponseWriter, r *http.Request, owner string) error {
	var body cove.PoolSize
	if err := decode(r, &body); err != nil {
		return err
	}
	if body.Size == nil {
		return fmt.Errorf("%w: size: required (0 empties the pool)", errBadRequest)
	}
	name := templateNameOnly(r.PathValue("templateID"))
	if err := a.cfg.Pools.SetPoolSize(r.Context(), owner, name, *body.Size); err != nil {
		return err
	}
	out := cove.Pool{Template: name, Size: *body.Size}
	for _, p := range a.cfg.Pools.Pools(owner) {
		if p.Template == name {
			out.Ready, out.LastError = p.Ready, p.LastError
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func poolsJSON(ps []orchestrator.PoolStatus) []cove.Pool {
	out := make([]cove.Pool, 0, len(ps))
	for _, p := range ps {
		out = append(out, cove.Pool{Template: p.Template, Size: p.Target, Ready: p.Ready, LastError: p.LastError})
	}
	return out
}
