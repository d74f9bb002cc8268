package adminroutes_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cove-dev/cove/internal/control/api/adminroutes"
	"github.com/cove-dev/cove/internal/httpx"
	"github.com/cove-dev/cove/internal/observe/retention"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/store/sqlite"
)

func TestEveryAdminRouteWantsTheAdminToken(t *testing.T) {
	db, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "cove.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	r := retention.New(retention.Config{Store: db, Policies: map[store.Dataset]retention.Policy{}})
	// The node routes need a cluster's store (PostgreSQL): internal/control/cluster's TestNodeRoutes
	// serves them through the SDK.
	routes := adminroutes.Routes(adminroutes.Config{Status: r.Status})
	if len(routes) != 1 {
		t.Fatalf("%d routes, want the status's", len(routes))
	}
	for _, rt := range routes {
		if rt.Auth != httpx.AuthAdmin {
			t.Errorf("%s is %s, want admin", rt.Pattern, rt.Auth)
		}
	}
	t.Run("the status lists every dataset", func(t *testing.T) {
		h := httpx.Chain{Edge: "api", Authenticate: func(r *http.Request, _ httpx.Auth) (context.Context, error) { return r.Context(), nil }}.Routes(routes)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/admin/status", nil))
		var st []retention.Status
		if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil || rec.Code != http.StatusOK || len(st) == 0 {
			t.Errorf("%d %s: %v", rec.Code, rec.Body, err)
		}
	})
	t.Run("a status that cannot be read is a 500 naming the request id", func(t *testing.T) {
		broken := adminroutes.Routes(adminroutes.Config{Status: func(context.Context) ([]retention.Status, error) {
			return nil, errors.New("database is closed")
		}})
		h := httpx.Chain{Edge: "api", Authenticate: func(r *http.Request, _ httpx.Auth) (context.Context, error) { return r.Context(), nil }}.Routes(broken)
		req := httptest.NewRequest(http.MethodGet, "/admin/status", nil)
		req.Header.Set(telemetry.HeaderRequestID, "req-admin")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusInternalServerError || !strings.Contains(rec.Body.String(), "retention status: database is closed (request id req-admin)") {
			t.Errorf("%d %s", rec.Code, rec.Body)
		}
	})
}
