package server

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cove-dev/cove/internal/control/api"
	"github.com/cove-dev/cove/internal/control/api/teamroutes"
	"github.com/cove-dev/cove/internal/control/console"
	"github.com/cove-dev/cove/internal/control/proxy"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/store/sqlite"
	cove "github.com/cove-dev/cove/sdk"
)

// brokenTraces is a trace store that was never opened: any read panics, as a handler's bug
// would.
type brokenTraces struct{ store.TraceStore }

// TestEveryListenerServesThroughTheOneChain builds each edge with the constructor the server
// uses and makes one of its handlers panic (a backend that was never wired: a nil interface):
// every listener answers with the request id in its header, a 500 in E2B's error body naming
// it, and one ERROR access line of its own.
func TestEveryListenerServesThroughTheOneChain(t *testing.T) {
	ctx := context.Background()
	db, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "cove.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	team, err := db.CreateTeam(ctx, "edges")
	if err != nil {
		t.Fatal(err)
	}
	key, _, err := db.CreateAPIKey(ctx, team.ID, "edges")
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	logger := telemetry.NewLogger(&logs, slog.LevelInfo)
	withKey := func(r *http.Request) *http.Request { r.Header.Set("X-API-Key", key); return r }

	apiEdge := api.New(api.Config{Keys: db, Logger: logger, // no Sandboxes: a sandbox route panics
		Routes: teamroutes.Routes(teamroutes.Config{Traces: brokenTraces{}})})
	form := func() *http.Request {
		r := httptest.NewRequest(http.MethodPost, console.Prefix+"login", strings.NewReader("key=e2b_someone"))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		return r
	}
	tests := []struct {
		name    string
		edge    http.Handler
		request *http.Request
		line    string // the access line's message
	}{
		{"an API route", apiEdge, withKey(httptest.NewRequest(http.MethodGet, "/sandboxes/i1", nil)), "api request"},
		{"a team route", apiEdge, withKey(httptest.NewRequest(http.MethodGet, "/traces/r1", nil)), "api request"},
		{"a console page", console.New(console.Config{Logger: logger}), form(), "console request"}, // no key store
		{"/metrics", api.MetricsHandler(api.MetricsConfig{Logger: logger}), httptest.NewRequest(http.MethodGet, "/metrics", nil), "metrics request"},
		{"the proxy", proxy.New(proxy.Config{Logger: logger}), func() *http.Request { // no backend
			r := httptest.NewRequest(http.MethodGet, "/health", nil)
			r.Header.Set(proxy.HeaderSandboxID, "i1")
			return r
		}(), "proxy request"},
	}
	for _, tt := range tests {
		t.Run(tt.name+" answers a panic with a 500 naming the request id and logs its line", func(t *testing.T) {
			logs.Reset()
			tt.request.Header.Set(telemetry.HeaderRequestID, "req-edge")
			rec := httptest.NewRecorder()
			tt.edge.ServeHTTP(rec, tt.request)
			if got := rec.Header().Get(telemetry.HeaderRequestID); got != "req-edge" {
				t.Errorf("request id header %q, want req-edge", got)
			}
			var body cove.ErrorBody
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || rec.Code != http.StatusInternalServerError ||
				body.Code != http.StatusInternalServerError || body.RequestID != "req-edge" || !strings.Contains(body.Message, "(request id req-edge)") {
				t.Errorf("%d %s (%v): want a 500 in E2B's error body naming the request id", rec.Code, rec.Body, err)
			}
			var access []map[string]any
			for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
				var line map[string]any
				if json.Unmarshal([]byte(l), &line) == nil && line["msg"] == tt.line {
					access = append(access, line)
				}
			}
			if len(access) != 1 || access[0]["level"] != "ERROR" || access[0]["request_id"] != "req-edge" ||
				access[0]["http.response.status_code"] != float64(http.StatusInternalServerError) {
				t.Errorf("want one ERROR %q line with the request id and 500, got %v in\n%s", tt.line, access, logs.String())
			}
		})
	}
}
