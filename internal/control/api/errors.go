package api

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/cove-dev/cove/internal/errdefs"
	"github.com/cove-dev/cove/internal/httpx"
	"github.com/cove-dev/cove/internal/store"
)

// Errors of this layer, of errdefs' kinds like the orchestrator's and the store's.
var (
	errUnauthorized = httpx.ErrUnauthorized
	errBadRequest   = httpx.ErrBadRequest
	errRoute        = errdefs.New(errdefs.ErrNotFound, "no such route")
	errForbidden    = errdefs.New(errdefs.ErrPermissionDenied, "forbidden")
)

func errNoRoute(r *http.Request) error {
	return fmt.Errorf("%w: %s %s", errRoute, r.Method, r.URL.Path)
}

// statusOf maps an error to the HTTP status E2B's SDKs expect: errdefs.Status, the one
// mapping of every HTTP edge. A killed sandbox is not found (the SDK's kill() returns false
// on a 404 body only), a paused one a conflict; a client that went away is a 499, only logged.
func statusOf(err error) int { return errdefs.Status(err) }

// fail writes err as a JSON error body and records it for the access line.
func (a *api) fail(w http.ResponseWriter, r *http.Request, err error) {
	ctx := r.Context()
	httpx.NoteFrom(ctx).Err = err
	httpx.WriteErrorStatus(ctx, w, statusOf(err), err.Error())
}

// authenticate reads the API key from X-API-Key or an Authorization bearer token.
// apiKeyFrom returns the API key a request carries: X-API-Key, or a Bearer Authorization.
func apiKeyFrom(r *http.Request) string {
	key := strings.TrimSpace(r.Header.Get("X-API-Key"))
	if key == "" {
		if auth := r.Header.Get("Authorization"); len(auth) > 7 && strings.EqualFold(auth[:7], "bearer ") {
			key = strings.TrimSpace(auth[7:])
		}
	}
	return key
}

func (a *api) authenticate(r *http.Request) (*store.APIKey, *store.Team, error) {
	key := apiKeyFrom(r)
	if key == "" {
		return nil, nil, fmt.Errorf("%w: missing API key: send it in the X-API-Key header", errUnauthorized)
	}
	if a.cfg.Keys == nil {
		return nil, nil, fmt.Errorf("%w: this server has no key store", errUnauthorized)
	}
	k, team, err := a.cfg.Keys.Authenticate(r.Context(), key)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, nil, fmt.Errorf("%w: invalid or revoked API key", errUnauthorized)
	case err != nil:
		return nil, nil, fmt.Errorf("authenticate API key: %w", err)
	case k == nil || team == nil:
		return nil, nil, fmt.Errorf("%w: invalid API key", errUnauthorized)
	}
	return k, team, nil
}
