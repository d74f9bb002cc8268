package teamroutes

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/observe/trace"
	"github.com/cove-dev/cove/internal/store"
)

func TestTheTraceRoute(t *testing.T) {
	db := newDB(t)
	team := newTeam(t, db)
	if err := db.InsertLogs(context.Background(), []store.LogLine{{Time: time.Now(), SandboxID: "s1", TeamID: team, Level: "info",
		Source: store.SourceEnvd, RequestID: "r1", Message: "rpc"}}); err != nil {
		t.Fatal(err)
	}
	closed := newDB(t)
	_ = closed.Close()
	tests := []struct {
		name     string
		store    store.TraceStore
		team     string
		wantCode int
		wantBody string
	}{
		{"the team's timeline is served", db, team, http.StatusOK, `"message":"rpc"`},
		{"a caller without a team is unauthorized, with the request id", db, "", http.StatusUnauthorized, `"requestId":"req-api"`},
		{"a store failure is a 500 naming the request id", closed, team, http.StatusInternalServerError, "(request id req-api)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := serve(Config{Traces: tt.store})
			req := httptest.NewRequest(http.MethodGet, "/traces/r1", nil)
			if tt.team != "" {
				req.Header.Set("X-Team", tt.team)
			}
			req.Header.Set(telemetry.HeaderRequestID, "req-api")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tt.wantCode || !strings.Contains(rec.Body.String(), tt.wantBody) {
				t.Fatalf("%d %s, want %d with %s", rec.Code, rec.Body, tt.wantCode, tt.wantBody)
			}
			if tt.wantCode == http.StatusOK {
				var tl trace.Timeline
				if err := json.Unmarshal(rec.Body.Bytes(), &tl); err != nil || tl.RequestID != "r1" || len(tl.Entries) != 1 {
					t.Errorf("timeline %+v, err %v", tl, err)
				}
			}
		})
	}
}
