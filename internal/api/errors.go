package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/cove-dev/cove/internal/network"
	"github.com/cove-dev/cove/internal/orchestrator"
	"github.com/cove-dev/cove/internal/secrets"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/telemetry"
)

// Errors of this layer, mapped by statusOf like the orchestrator's.
var (
	errUnauthorized = errors.New("unauthorized")
	errBadRequest   = errors.New("bad request")
	errRoute        = errors.New("no such route")
	errForbidden    = errors.New("forbidden")
)

func errNoRoute(r *http.Request) error {
	return fmt.Errorf("%w: %s %s", errRoute, r.Method, r.URL.Path)
}

// statusClientClosed is nginx's status for a client that went away; it is only logged.
const statusClientClosed = 499

// statusOf maps an error to the HTTP status E2B's SDKs expect. It is the one place where
// that mapping lives.
func statusOf(err error) int {
	var gone *orchestrator.GoneError
	var paused *orchestrator.PausedError
	var unserved *notImplementedError
	var conflict *conflictError
	switch {
	case errors.Is(err, errUnauthorized):
		return http.StatusUnauthorized
	case errors.Is(err, errForbidden):
		return http.StatusForbidden
	case errors.Is(err, errBadRequest), errors.Is(err, orchestrator.ErrInvalid), errors.Is(err, store.ErrInvalid),
		errors.Is(err, network.ErrInvalid):
		return http.StatusBadRequest
	// A killed sandbox is not found: the SDK's kill() returns false on a 404 body only.
	case errors.As(err, &gone),
		errors.Is(err, orchestrator.ErrNotFound),
		errors.Is(err, orchestrator.ErrTemplateNotFound),
		errors.Is(err, store.ErrNotFound), errors.Is(err, secrets.ErrNotFound),
		errors.Is(err, errRoute):
		return http.StatusNotFound
	case errors.As(err, &paused), errors.As(err, &conflict),
		errors.Is(err, orchestrator.ErrConflict),
		errors.Is(err, store.ErrConflict):
		return http.StatusConflict
	case errors.As(err, &unserved):
		return http.StatusNotImplemented
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout
	case errors.Is(err, context.Canceled):
		return statusClientClosed
	default:
		return http.StatusInternalServerError
	}
}

// errorBody is E2B's error shape; the SDKs read code from it.
type errorBody struct {
	Code      int    `json:"code"`
	Message   string `json:"message"`
	RequestID string `json:"requestId"`
}

// fail writes err as a JSON error body and records it for the access line.
func (a *api) fail(w http.ResponseWriter, r *http.Request, err error) {
	ctx := r.Context()
	infoFrom(ctx).err = err
	code := statusOf(err)
	id := telemetry.RequestID(ctx)
	msg := err.Error()
	if id != "" && !strings.Contains(msg, id) {
		msg += " (request id " + id + ")"
	}
	if code == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="cove"`)
	}
	writeJSON(w, code, errorBody{Code: code, Message: msg, RequestID: id})
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
