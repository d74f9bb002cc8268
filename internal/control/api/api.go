// Package api serves Cove's control plane: the E2B REST API (create, list, inspect, kill,
// pause, resume and connect sandboxes) with API-key authentication. Every REST route of Cove
// lives in this tree: this package's table (routes), the team routes (api/teamroutes) and
// the operator's (api/adminroutes), all served through the one chain (httpx.Chain).
//
// The one idea: handlers only translate between E2B's wire shapes and the orchestrator.
// Every handler returns an error, and one function (statusOf) turns an error into the HTTP
// status the official SDKs branch on; every error body names what failed and carries the
// request id.
//
// It must not import the proxy, the console or server; errors go through errdefs and the edge
// through httpx.
package api

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/cove-dev/cove/internal/builder/template/build"
	"github.com/cove-dev/cove/internal/control/authz"
	"github.com/cove-dev/cove/internal/control/orchestrator"
	"github.com/cove-dev/cove/internal/httpx"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/sdk/envdapi"
	"github.com/cove-dev/cove/sdk/reason"
)

// Sandboxes is what the API needs from the orchestrator.
type Sandboxes interface {
	Create(ctx context.Context, req orchestrator.CreateRequest) (*store.Sandbox, error)
	Get(ctx context.Context, teamID, id string) (*store.Sandbox, error)
	List(ctx context.Context, f store.SandboxFilter) (*store.SandboxPage, error)
	Kill(ctx context.Context, teamID, id string, why reason.KillReason, apiKeyID string) error
	SetTimeout(ctx context.Context, teamID, id string, d time.Duration) error
	Refresh(ctx context.Context, teamID, id string, d time.Duration) error
	Pause(ctx context.Context, teamID, id string) error
	// PauseWith pauses the way asked (opts.Kind; the server's default when ""): a backend
	// that could pause only one way would keep memory a caller asked to free, or the other
	// way round, so it is part of the contract.
	PauseWith(ctx context.Context, teamID, id string, opts orchestrator.PauseOptions) error
	Resume(ctx context.Context, teamID, id string, timeout time.Duration) (*store.Sandbox, error)
	Connect(ctx context.Context, teamID, id string, timeout time.Duration) (sb *store.Sandbox, resumed bool, err error)
}

// Authenticator resolves an API key to its team; store.Keys implements it.
type Authenticator interface {
	// Authenticate returns store.ErrNotFound for an unknown or revoked key.
	Authenticate(ctx context.Context, key string) (*store.APIKey, *store.Team, error)
}

// Config is what New needs.
type Config struct {
	Sandboxes Sandboxes
	Keys      Authenticator
	// Domain is reported to clients as the sandboxes' base domain ({port}-{id}.{domain});
	// "" reports null, so SDKs use their configured sandbox URL.
	Domain string
	// Logger is the base logger; nil uses the one in each request's context.
	Logger *slog.Logger
	// AdminToken enables the /admin routes for callers that send it; "" disables them.
	AdminToken string
	// Routes are more routes of the API's table, each authenticated at its own level: the
	// team routes (events, metrics, logs, traces; they read the caller's team with
	// authz.Team) and the admin routes (retention status, nodes).
	Routes []httpx.Route
	// Activity answers /teams/{teamID}/metrics from the sandbox records; nil leaves those
	// operations to the 501 of operations this server does not serve.
	Activity store.Activity
	// Builds serves E2B's template builder API; nil leaves those operations to the 501.
	Builds *build.Builds
	// Networks reads and replaces sandboxes' egress policies; nil leaves
	// PUT /sandboxes/{id}/network to the 501 of operations this server does not serve.
	Networks Networks
	// Secrets serves /secrets; nil leaves those operations to the 501.
	Secrets Secrets
	// Pools sizes and lists the warm pools; nil leaves their routes out.
	Pools Pools
	// Identity issues workload identity tokens (create's iam) and serves their discovery
	// document and key set; nil refuses iam with a 400.
	Identity Identity
	// Durable forks sandboxes and keeps snapshots (the orchestrator), Volumes keeps volumes
	// (internal/control/volumes); nil leaves their routes out. Declared here rather than discovered on
	// Sandboxes, so what a server serves is what its wiring says.
	Durable Durable
	Volumes Volumes
}

// EnvdVersion is the envd version reported when a sandbox record has none. The SDKs switch
// features off below 0.6.4.
const EnvdVersion = envdapi.Version

// clientID fills E2B's deprecated clientID field on a lone server.
const clientID = "cove"

// clientOf is E2B's clientID of a sandbox: the cluster node that runs it (E2B names its
// node there too), or "cove" on a lone server.
func clientOf(sb *store.Sandbox) string {
	if sb.Node != "" {
		return sb.Node
	}
	return clientID
}

// maxBody bounds a request body; the largest legitimate one is a create with env vars.
const maxBody = 1 << 20

type api struct {
	cfg     Config
	table   []httpx.Route // the route table: declared once, by routes
	edge    http.Handler  // the table served through the chain
	uploads uploadTokens
}

// New returns the REST API handler: its route table served through the one chain
// (httpx.Chain): the client's request id (X-E2B-Request-Id or X-Request-Id) taken or minted
// and echoed, one access line per request, recovery, each route's authentication.
func New(cfg Config) http.Handler {
	a := &api{cfg: cfg}
	a.routes()
	a.edge = a.chain().Routes(a.table)
	return a
}

// Routes is the API's route table as New serves it, for the tests that check it.
func Routes(cfg Config) []httpx.Route {
	a := &api{cfg: cfg}
	a.routes()
	return a.table
}

// chain is the API's edge: API keys authenticate a team, the admin token the operator.
func (a *api) chain() httpx.Chain {
	return httpx.Chain{Edge: "api", Logger: a.cfg.Logger, Authenticate: a.authenticateAt, Done: countRequest}
}

// countRequest counts an answered request by its route and status class.
func countRequest(_ *http.Request, status int, note *httpx.Note) {
	route := note.Route
	if route == "" {
		route = "unmatched" // keeps the label set bounded: a 405, or no route at all
	}
	telemetry.APIRequests.WithLabelValues(route, httpx.StatusClass(status)).Inc()
}

func (a *api) routes() {
	a.handle("POST /sandboxes", a.create)
	a.handle("POST /v2/sandboxes", a.create)
	a.handle("GET /sandboxes", a.listLegacy)
	a.handle("GET /v2/sandboxes", a.list)
	a.handle("GET /sandboxes/{id}", a.get)
	a.handle("DELETE /sandboxes/{id}", a.kill)
	a.handle("POST /sandboxes/{id}/timeout", a.setTimeout)
	a.handle("POST /sandboxes/{id}/refreshes", a.refresh)
	a.handle("POST /sandboxes/{id}/pause", a.pause)
	a.handle("POST /sandboxes/{id}/resume", a.resume)
	a.handle("POST /sandboxes/{id}/connect", a.connect)
	a.handle("POST /v2/sandboxes/{id}/connect", a.connect)
	a.routeDurable()
	a.routePools()
	a.handleAdmin("DELETE /admin/sandboxes/{id}", a.adminKill)
	a.handle("GET /teams", a.teams)
	if a.cfg.Networks != nil {
		a.handle("PUT /sandboxes/{id}/network", a.updateNetwork)
	}
	if a.cfg.Secrets != nil {
		a.secretRoutes()
	}
	if a.cfg.Identity != nil {
		a.identityRoutes()
	}
	if a.cfg.Activity != nil {
		a.handle("GET /teams/{teamID}/metrics", a.teamMetrics)
		a.handle("GET /teams/{teamID}/metrics/max", a.teamMetricsMax)
	}
	a.templateRoutes()
	// Liveness for load balancers and the SDKs: no key needed, 204 as envd's /health answers.
	a.public("GET /health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	a.table = append(a.table, a.cfg.Routes...)
	a.public("/", func(w http.ResponseWriter, r *http.Request) {
		if h := a.unroutedDurable(r); h != nil {
			h(w, r)
			return
		}
		a.fail(w, r, errUnrouted(r))
	})
}

// caller is the authenticated team and key of a request.
type caller struct {
	team *store.Team
	key  *store.APIKey
}

type callerKey struct{}

// handlerFunc is a route's body: it writes a success response or returns the error to map.
type handlerFunc func(w http.ResponseWriter, r *http.Request, c caller) error

// handle declares a route behind an API key: h gets the caller's team and key.
func (a *api) handle(pattern string, h handlerFunc) {
	a.table = append(a.table, httpx.Route{Pattern: pattern, Auth: httpx.AuthTeam, Handler: withCaller(h)})
}

// public declares a route anyone may call (or whose handler checks a credential of its own).
func (a *api) public(pattern string, h http.HandlerFunc) {
	a.table = append(a.table, httpx.Route{Pattern: pattern, Auth: httpx.AuthNone, Handler: httpx.Serve(h)})
}

// withCaller is h given the caller the chain's authentication put in the context.
func withCaller(h handlerFunc) httpx.Handler {
	return func(w http.ResponseWriter, r *http.Request) error {
		c, ok := r.Context().Value(callerKey{}).(caller)
		if !ok {
			return fmt.Errorf("%w: no caller for this request", errUnauthorized)
		}
		return h(w, r, c)
	}
}

// authenticated is h behind an API key, for a handler reached outside the route table (the
// unrouted fallback).
func (a *api) authenticated(h handlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, err := a.authenticateAt(r, httpx.AuthTeam)
		if err == nil {
			r = r.WithContext(ctx)
			err = withCaller(h)(w, r)
		}
		if err != nil {
			a.fail(w, r, err)
		}
	}
}

// authenticateAt is the API's authentication and team scope, the chain's: an API key for a
// team's route, the admin token for the operator's. The path's sandbox id and the caller's
// team and key are added to the context logger and the access line once, here.
func (a *api) authenticateAt(r *http.Request, level httpx.Auth) (context.Context, error) {
	ctx := r.Context()
	note := httpx.NoteFrom(ctx)
	if id := r.PathValue("id"); id != "" {
		note.Add(telemetry.KeySandboxID, id)
		ctx = telemetry.With(ctx, telemetry.KeySandboxID, id)
	}
	if level == httpx.AuthAdmin {
		return a.authenticateAdmin(r.WithContext(ctx))
	}
	key, team, err := a.authenticate(r)
	if err != nil {
		return nil, err
	}
	note.Add(telemetry.KeyTeamID, team.ID)
	ctx = telemetry.With(ctx, telemetry.KeyTeamID, team.ID, telemetry.KeyAPIKeyID, key.ID)
	ctx = authz.With(ctx, authz.Caller{TeamID: team.ID, KeyID: key.ID, KeyName: key.Name})
	return context.WithValue(ctx, callerKey{}, caller{team: team, key: key}), nil
}

// ServeHTTP serves the route table through the chain.
func (a *api) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.edge.ServeHTTP(w, r) }
