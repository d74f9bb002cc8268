package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/cove-dev/cove/internal/control/secrets"
	cove "github.com/cove-dev/cove/sdk"
)

// Secrets is what the API needs of the secret store (secrets.Store).
type Secrets interface {
	Create(ctx context.Context, team, name, value string, md map[string]string) (secrets.Info, error)
	Update(ctx context.Context, team, ref, value string, md map[string]string) (secrets.Info, error)
	Get(ctx context.Context, team, ref string) (secrets.Info, error)
	List(ctx context.Context, team string, limit int, next string) ([]secrets.Info, string, error)
	Delete(ctx context.Context, team, ref string) error
}

func (a *api) secretRoutes() {
	a.handle("GET /secrets", a.listSecrets)
	a.handle("POST /secrets", a.createSecret)
	a.handle("GET /secrets/{secretID}", a.getSecret)
	a.handle("POST /secrets/{secretID}", a.updateSecret)
	a.handle("DELETE /secrets/{secretID}", a.deleteSecret)
}

func secretError(op string, err error) error {
	switch {
	case errors.Is(err, secrets.ErrInvalid):
		return fmt.Errorf("%w: %s: %v", errBadRequest, op, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}

func (a *api) listSecrets(w http.ResponseWriter, r *http.Request, c caller) error {
	limit := 100
	if s := r.URL.Query().Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 100 {
			return fmt.Errorf("%w: limit %q is not a number from 1 to 100", errBadRequest, s)
		}
		limit = n
	}
	list, next, err := a.cfg.Secrets.List(r.Context(), c.team.ID, limit, r.URL.Query().Get("nextToken"))
	if err != nil {
		return secretError("list secrets", err)
	}
	if next != "" {
		w.Header().Set("X-Next-Token", next)
	}
	if list == nil {
		list = []secrets.Info{}
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

func (a *api) createSecret(w http.ResponseWriter, r *http.Request, c caller) error {
	var b cove.NewSecret
	if err := decode(r, &b); err != nil {
		return err
	}
	if b.Name == "" || b.Value == "" {
		return fmt.Errorf("%w: name and value are required", errBadRequest)
	}
	info, err := a.cfg.Secrets.Create(r.Context(), c.team.ID, b.Name, b.Value, b.Metadata)
	if err != nil {
		return secretError("create secret", err)
	}
	writeJSON(w, http.StatusCreated, info)
	return nil
}

func (a *api) getSecret(w http.ResponseWriter, r *http.Request, c caller) error {
	info, err := a.cfg.Secrets.Get(r.Context(), c.team.ID, r.PathValue("secretID"))
	if err != nil {
		return secretError("get secret", err)
	}
	writeJSON(w, http.StatusOK, info)
	return nil
}

func (a *api) updateSecret(w http.ResponseWriter, r *http.Request, c caller) error {
	var b cove.SecretUpdate
	if err := decode(r, &b); err != nil {
		return err
	}
	if b.Value == "" {
		return fmt.Errorf("%w: value is required", errBadRequest)
	}
	info, err := a.cfg.Secrets.Update(r.Context(), c.team.ID, r.PathValue("secretID"), b.Value, b.Metadata)
	if err != nil {
		return secretError("update secret", err)
	}
	writeJSON(w, http.StatusOK, info)
	return nil
}

func (a *api) deleteSecret(w http.ResponseWriter, r *http.Request, c caller) error {
	if err := a.cfg.Secrets.Delete(r.Context(), c.team.ID, r.PathValue("secretID")); err != nil {
		return secretError("delete secret", err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
