// Package api serves Cove's control plane: the E2B REST API (create, list, inspect, kill,
// pause, resume and connect sandboxes) with API-key authentication.
//
// The one idea: handlers only translate between E2B's wire shapes and the orchestrator.
// Every handler returns an error, and one function (statusOf) turns an error into the HTTP
// status the official SDKs branch on; every error body names what failed and carries the
// request id.
package api

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/cove-dev/cove/internal/orchestrator"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/telemetry"
	"github.com/cove-dev/cove/reason"
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
	// Routes are more handlers served behind the API's authentication, by mux pattern
	// (events, metrics, logs); they read the caller's team with telemetry.Caller.
	Routes map[string]http.Handler
	// Activity answers /teams/{teamID}/metrics from the sandbox records; nil leaves those
	// operations to the 501 of operations this server does not serve.
	Activity store.Activity
	// Networks reads and replaces sandboxes' egress policies; nil leaves
	// PUT /sandboxes/{id}/network to the 501 of operations this server does not serve.
	Networks Networks
	// Secrets serves /secrets; nil leaves those operations to the 501.
	Secrets Secrets
}

// EnvdVersion is the envd version reported when a sandbox record has none. The SDKs switch
// features off below 0.6.4.
const EnvdVersion = "0.6.4"

// clientID fills E2B's deprecated clientID field.
const clientID = "cove"

// maxBody bounds a request body; the largest legitimate one is a create with env vars.
const maxBody = 1 << 20

type api struct {
	cfg Config
	mux *http.ServeMux
}

// New returns the REST API handler. It takes the client's request id (X-E2B-Request-Id or
// X-Request-Id) or mints one, echoes it, and logs one line per request.
func New(cfg Config) http.Handler {
	a := &api{cfg: cfg, mux: http.NewServeMux()}
	a.routes()
	return a
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
	a.handleAdmin("DELETE /admin/sandboxes/{id}", a.adminKill)
	a.handle("GET /teams", a.teams)
	if a.cfg.Networks != nil {
		a.handle("PUT /sandboxes/{id}/network", a.updateNetwork)
	}
	if a.cfg.Secrets != nil {
		a.secretRoutes()
	}
	if a.cfg.Activity != nil {
		a.handle("GET /teams/{teamID}/metrics", a.teamMetrics)
		a.handle("GET /teams/{teamID}/metrics/max", a.teamMetricsMax)
	}
	// Liveness for load balancers and the SDKs: no key needed, 204 as envd's /health answers.
	a.mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	for pattern, h := range a.cfg.Routes {
		a.handle(pattern, func(w http.ResponseWriter, r *http.Request, _ caller) error {
			h.ServeHTTP(w, r)
			return nil
		})
	}
	a.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		a.fail(w, r, errUnrouted(r))
	})
}

// caller is the authenticated team and key of a request.
type caller struct {
	team *store.Team
	key  *store.APIKey
}

// handlerFunc is a route's body: it writes a success response or returns the error to map.
type handlerFunc func(w http.ResponseWriter, r *http.Request, c caller) error

// handle registers h behind authentication. The sandbox id of the path and the caller's
// team and key are added to the context logger once, here.
func (a *api) handle(pattern string, h handlerFunc) {
	a.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		info := infoFrom(ctx)
		if id := r.PathValue("id"); id != "" {
			info.sandboxID = id
			ctx = telemetry.With(ctx, telemetry.KeySandboxID, id)
		}
		key, team, err := a.authenticate(r)
		if err != nil {
			a.fail(w, r.WithContext(ctx), err)
			return
		}
		info.teamID = team.ID
		ctx = telemetry.With(ctx, telemetry.KeyTeamID, team.ID, "api_key.id", key.ID)
		ctx = telemetry.WithCaller(ctx, team.ID, key.ID, key.Name)
		r = r.WithContext(ctx)
		if err := h(w, r, caller{team: team, key: key}); err != nil {
			a.fail(w, r, err)
		}
	})
}

// ServeHTTP sets up the request id and logger, routes, and logs the access line.
func (a *api) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	ctx, _ := requestContext(r, a.cfg.Logger, w)
	info := &requestInfo{}
	ctx = context.WithValue(ctx, requestInfoKey{}, info)
	rec := &statusRecorder{ResponseWriter: w}
	r = r.WithContext(ctx)
	defer func() {
		status := rec.status
		if status == 0 {
			status = http.StatusOK
		}
		attrs := []any{
			"http.request.method", r.Method,
			"http.route", r.Pattern,
			"http.response.status_code", status,
			"duration_ms", float64(time.Since(start).Microseconds()) / 1000,
		}
		if info.sandboxID != "" {
			attrs = append(attrs, telemetry.KeySandboxID, info.sandboxID)
		}
		if info.teamID != "" {
			attrs = append(attrs, telemetry.KeyTeamID, info.teamID)
		}
		level := slog.LevelInfo
		if info.err != nil {
			attrs = append(attrs, "error", info.err.Error())
			if status >= 500 {
				level = slog.LevelError
			}
		}
		telemetry.Logger(ctx).Log(ctx, level, "api request", attrs...)
		route := r.Pattern
		if route == "" {
			route = "unmatched" // keeps the label set bounded for unknown paths
		}
		telemetry.APIRequests.WithLabelValues(route, strconv.Itoa(status/100)+"xx").Inc()
	}()
	a.mux.ServeHTTP(rec, r)
}

// requestContext returns r's context with the request id and a logger carrying it, taking
// the id from an outer middleware, the client's header, or minting one; it echoes the id.
func requestContext(r *http.Request, base *slog.Logger, w http.ResponseWriter) (context.Context, string) {
	ctx := r.Context()
	id := telemetry.RequestID(ctx)
	fromCtx := id != ""
	if id == "" {
		id = telemetry.RequestIDFrom(r.Header)
	}
	if id == "" {
		id = telemetry.NewRequestID()
		r.Header.Set(telemetry.HeaderRequestID, id)
	}
	w.Header().Set(telemetry.HeaderRequestID, id)
	if base != nil {
		ctx = telemetry.WithLogger(ctx, base)
		return telemetry.WithRequestID(ctx, id), id
	}
	if !fromCtx {
		ctx = telemetry.WithRequestID(ctx, id)
	}
	return ctx, id
}

// requestInfo collects what the access line reports but only handlers learn.
type requestInfo struct {
	sandboxID, teamID string
	err               error
}

type requestInfoKey struct{}

func infoFrom(ctx context.Context) *requestInfo {
	if info, ok := ctx.Value(requestInfoKey{}).(*requestInfo); ok {
		return info
	}
	return &requestInfo{}
}

// statusRecorder remembers the status written, for the access line.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }
