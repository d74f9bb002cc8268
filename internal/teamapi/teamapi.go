// Package teamapi is the scaffolding shared by Cove's team-scoped HTTP APIs (events and
// webhooks, logs and commands, metrics, traces): the caller's team from the context, and
// errors answered through the one HTTP edge (httpx, errdefs).
//
// It must not import the APIs built on it (events, logs, sampler, trace) or the orchestrator.
package teamapi

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cove-dev/cove/internal/errdefs"
	"github.com/cove-dev/cove/internal/httpx"
	"github.com/cove-dev/cove/internal/telemetry"
)

// Errors handlers return for the client's mistakes (the edge's, httpx's); StatusOf maps them.
var (
	ErrBadRequest   = httpx.ErrBadRequest
	ErrUnauthorized = httpx.ErrUnauthorized
)

// BadRequest is an ErrBadRequest with a message.
func BadRequest(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadRequest, fmt.Sprintf(format, args...))
}

// Limit reads the query's limit: def when absent, else a whole number from 1 to most (a
// 400 naming the parameter otherwise).
func Limit(q url.Values, def, most int) (int, error) {
	s := q.Get("limit")
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > most {
		return 0, BadRequest("limit %q: want 1..%d", s, most)
	}
	return n, nil
}

// OneOf reads the query's parameter name, which must be one of choices: the first when
// absent, a 400 naming the parameter and the choices for anything else.
func OneOf(q url.Values, name string, choices ...string) (string, error) {
	s := q.Get(name)
	if s == "" {
		return choices[0], nil
	}
	if slices.Contains(choices, s) {
		return s, nil
	}
	return "", BadRequest("%s %q: want %s or %s", name, s, strings.Join(choices[:len(choices)-1], ", "), choices[len(choices)-1])
}

// EncodeCursor is the page token of a listing's position: a time and the key that orders
// rows of the same time, as base64url("<unix µs>:<key>").
func EncodeCursor(t time.Time, key string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(t.UnixMicro(), 10) + ":" + key))
}

// DecodeCursor reads a token EncodeCursor made; the key is never "".
func DecodeCursor(s string) (time.Time, string, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return time.Time{}, "", errors.New("not base64url")
	}
	us, key, ok := strings.Cut(string(b), ":")
	n, err := strconv.ParseInt(us, 10, 64)
	if !ok || err != nil || key == "" {
		return time.Time{}, "", errors.New("malformed")
	}
	return time.UnixMicro(n).UTC(), key, nil
}

// StatusOf maps an error to its HTTP status: errdefs.Status, the one mapping.
func StatusOf(err error) int { return errdefs.Status(err) }

// HandlerFunc is a route's body: it writes the response or returns the error to answer.
type HandlerFunc func(w http.ResponseWriter, r *http.Request, teamID string) error

// Mux routes a team API's requests to handlers that know the caller's team.
type Mux struct {
	name   string
	team   func(context.Context) (string, bool)
	mux    *http.ServeMux
	routes map[string]http.Handler
}

// New returns a mux for the API called name (in its error log lines), taking each
// request's team from team (nil answers 401 to every request).
func New(name string, team func(context.Context) (string, bool)) *Mux {
	return &Mux{name: name, team: team, mux: http.NewServeMux(), routes: map[string]http.Handler{}}
}

// Handle registers h for pattern; requests without a team get 401.
func (m *Mux) Handle(pattern string, h HandlerFunc) {
	route := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		team, ok := "", false
		if m.team != nil {
			team, ok = m.team(r.Context())
		}
		var err error
		if !ok || team == "" {
			err = fmt.Errorf("%w: no team for this request", ErrUnauthorized)
		} else {
			err = h(w, r, team)
		}
		if err != nil {
			m.Fail(w, r, err)
		}
	})
	m.mux.Handle(pattern, route)
	m.routes[pattern] = route
}

// Routes is the API's route table, pattern to handler, for an edge that serves the API on
// its own mux (Cove's API, behind its authentication): the routes are declared once, by
// Handle.
func (m *Mux) Routes() map[string]http.Handler { return maps.Clone(m.routes) }

// ServeHTTP serves the routes. Behind Cove's API the request id is in the context already;
// standalone, the client's is taken or one is minted, the same way.
func (m *Mux) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx, _ := httpx.RequestContext(w, r, nil)
	m.mux.ServeHTTP(w, r.WithContext(ctx))
}

// Fail answers err with its status and a body naming the request id; server errors are
// logged.
func (m *Mux) Fail(w http.ResponseWriter, r *http.Request, err error) {
	ctx := r.Context()
	code := StatusOf(err)
	if code >= 500 {
		telemetry.Logger(ctx).Error(m.name, telemetry.KeyHTTPRoute, r.Pattern, telemetry.KeyError, err.Error())
	}
	httpx.WriteErrorStatus(ctx, w, code, err.Error())
}

// WriteJSON writes v as JSON with the status code.
func WriteJSON(w http.ResponseWriter, code int, v any) { httpx.WriteJSON(w, code, v) }
