// Package teamroutes is the REST routes of Cove's team-scoped reads and webhooks (events and
// webhooks, logs and commands, metrics, traces): one route table (Routes), served by the API
// behind its authentication, through the one chain (httpx.Chain).
//
// The one idea: a route translates between the wire and a domain package's query (events,
// logs, sampler, trace), which knows nothing of HTTP; the caller's team comes from the
// context (authz), where the chain's authentication put it.
//
// It must not import the orchestrator, the API's own package, the proxy or server.
package teamroutes

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cove-dev/cove/internal/control/authz"
	"github.com/cove-dev/cove/internal/httpx"
	"github.com/cove-dev/cove/internal/store"
)

// Errors routes return for the client's mistakes (the edge's, httpx's); errdefs.Status maps them.
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

// Config is what the team routes read. A nil store leaves its routes out.
type Config struct {
	// Events keeps events, webhooks and their deliveries.
	Events store.EventStore
	// AllowNets are ranges a webhook may name although deliveries otherwise refuse them.
	AllowNets []netip.Prefix
	// Logs and Commands keep sandboxes' log lines and command records.
	Logs     store.LogStore
	Commands store.CommandStore
	// LogSandbox checks that team teamID has sandbox (or template build) id, killed ones
	// included, and returns its template; an error wrapping store.ErrNotFound answers 404.
	// Nil skips the check: the stores' team filter still hides other teams' lines.
	LogSandbox func(ctx context.Context, teamID, id string) (templateID string, err error)
	// Labels returns the sandbox's metadata, stored once with the sandbox and joined onto
	// its lines at query time, never copied onto every stored line. Nil joins none.
	Labels func(ctx context.Context, teamID, id string) (map[string]string, error)
	// Metrics keeps sandboxes' resource samples.
	Metrics store.MetricStore
	// MetricSandbox returns nil when team teamID may read sandbox id's samples, killed
	// sandboxes included; an error wrapping store.ErrNotFound answers 404.
	MetricSandbox func(ctx context.Context, teamID, id string) error
	// Traces joins what is stored under one request id.
	Traces store.TraceStore
}

// Routes is the team routes' table: every route wants a team (httpx.AuthTeam).
func Routes(cfg Config) []httpx.Route {
	var routes []httpx.Route
	if cfg.Events != nil {
		routes = append(routes, eventRoutes(cfg)...)
	}
	if cfg.Logs != nil && cfg.Commands != nil {
		routes = append(routes, logRoutes(cfg)...)
	}
	if cfg.Metrics != nil {
		routes = append(routes, metricRoutes(cfg)...)
	}
	if cfg.Traces != nil {
		routes = append(routes, traceRoutes(cfg)...)
	}
	return routes
}

// teamHandler is a team route's body: it knows the caller's team.
type teamHandler func(w http.ResponseWriter, r *http.Request, teamID string) error

// route is a team route: the chain authenticated the caller; its team is in the context.
func route(pattern string, h teamHandler) httpx.Route {
	return httpx.Route{Pattern: pattern, Auth: httpx.AuthTeam, Handler: func(w http.ResponseWriter, r *http.Request) error {
		team, ok := authz.Team(r.Context())
		if !ok {
			return fmt.Errorf("%w: no team for this request", ErrUnauthorized)
		}
		return h(w, r, team)
	}}
}

// writeJSON writes v as JSON with the status code.
func writeJSON(w http.ResponseWriter, code int, v any) { httpx.WriteJSON(w, code, v) }
