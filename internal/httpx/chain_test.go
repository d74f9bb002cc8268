package httpx_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cove-dev/cove/internal/errdefs"
	"github.com/cove-dev/cove/internal/httpx"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	cove "github.com/cove-dev/cove/sdk"
)

type teamKey struct{}

// widgets is an edge of one team route, one admin route and one open one; X-Team is its
// credential, "root" the admin's.
func widgets(logger *slog.Logger) http.Handler {
	chain := httpx.Chain{Edge: "widgets", Logger: logger, Authenticate: func(r *http.Request, auth httpx.Auth) (context.Context, error) {
		team := r.Header.Get("X-Team")
		switch {
		case team == "":
			return nil, fmt.Errorf("%w: missing key", httpx.ErrUnauthorized)
		case auth == httpx.AuthAdmin && team != "root":
			return nil, fmt.Errorf("%w: not the admin", httpx.ErrUnauthorized)
		}
		httpx.NoteFrom(r.Context()).Add(telemetry.KeyTeamID, team)
		return context.WithValue(r.Context(), teamKey{}, team), nil
	}}
	return chain.Routes([]httpx.Route{
		{Pattern: "GET /widgets/{id}", Auth: httpx.AuthTeam, Handler: func(w http.ResponseWriter, r *http.Request) error {
			switch r.PathValue("id") {
			case "missing":
				return fmt.Errorf("widget missing: %w", errdefs.ErrNotFound)
			case "broken":
				return errors.New("disk on fire")
			case "bad":
				return fmt.Errorf("%w: id %q is not a widget", httpx.ErrBadRequest, "bad")
			case "panic":
				panic(errors.New("widget table corrupt"))
			}
			httpx.WriteJSON(w, http.StatusOK, map[string]string{"team": r.Context().Value(teamKey{}).(string), "id": r.PathValue("id")})
			return nil
		}},
		{Pattern: "DELETE /widgets/{id}", Auth: httpx.AuthAdmin, Handler: func(w http.ResponseWriter, r *http.Request) error {
			w.WriteHeader(http.StatusNoContent)
			return nil
		}},
		{Pattern: "GET /health", Auth: httpx.AuthNone, Handler: func(w http.ResponseWriter, r *http.Request) error {
			w.WriteHeader(http.StatusNoContent)
			return nil
		}},
	})
}

func TestTheChainAuthenticatesEachRouteAndAnswersItsErrors(t *testing.T) {
	var logs bytes.Buffer
	h := widgets(telemetry.NewLogger(&logs, slog.LevelInfo))
	tests := []struct {
		name        string
		method      string
		path        string
		team        string
		requestID   string // sent by the client; "" lets the chain mint one
		wantCode    int
		wantMessage string // the error body's message, up to the request id
		wantLevel   string // the access line's
	}{
		{"a team's request reaches the route with its team", "GET", "/widgets/w1", "t1", "req-1", http.StatusOK, "", "INFO"},
		{"a request without a credential is 401 before the route", "GET", "/widgets/w1", "", "req-2", http.StatusUnauthorized, "unauthorized: missing key (request id req-2)", "INFO"},
		{"a missing record is 404 naming the request id", "GET", "/widgets/missing", "t1", "req-3", http.StatusNotFound, "widget missing: not found (request id req-3)", "INFO"},
		{"a bad request is 400 naming what is wrong", "GET", "/widgets/bad", "t1", "req-4", http.StatusBadRequest, `bad request: id "bad" is not a widget (request id req-4)`, "INFO"},
		{"a server error is 500 and an ERROR line", "GET", "/widgets/broken", "t1", "req-5", http.StatusInternalServerError, "disk on fire (request id req-5)", "ERROR"},
		{"a panic is 500 with E2B's body and an ERROR line", "GET", "/widgets/panic", "t1", "req-6", http.StatusInternalServerError, "internal error: GET /widgets/panic failed in the server (request id req-6)", "ERROR"},
		{"a request without an id gets one minted", "GET", "/widgets/missing", "t1", "", http.StatusNotFound, "widget missing: not found (request id ", "INFO"},
		{"an admin route refuses a team's credential", "DELETE", "/widgets/w1", "t1", "req-7", http.StatusUnauthorized, "unauthorized: not the admin (request id req-7)", "INFO"},
		{"an admin route takes the admin's", "DELETE", "/widgets/w1", "root", "req-8", http.StatusNoContent, "", "INFO"},
		{"an open route asks for nothing", "GET", "/health", "", "req-9", http.StatusNoContent, "", "INFO"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			logs.Reset()
			req := httptest.NewRequest(tt.method, tt.path, nil)
			if tt.team != "" {
				req.Header.Set("X-Team", tt.team)
			}
			if tt.requestID != "" {
				req.Header.Set(telemetry.HeaderRequestID, tt.requestID)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tt.wantCode {
				t.Fatalf("status %d, want %d: %s", rec.Code, tt.wantCode, rec.Body)
			}
			echoed := rec.Header().Get(telemetry.HeaderRequestID)
			if echoed == "" || (tt.requestID != "" && echoed != tt.requestID) {
				t.Errorf("request id header %q, want %q (or a minted one)", echoed, tt.requestID)
			}
			line := logs.String()
			if strings.Count(line, `"msg":"widgets request"`) != 1 || !strings.Contains(line, `"level":"`+tt.wantLevel+`"`) ||
				!strings.Contains(line, `"request_id":"`+echoed+`"`) || !strings.Contains(line, fmt.Sprintf(`"http.response.status_code":%d`, tt.wantCode)) {
				t.Errorf("want one %s access line with the request id and status: %s", tt.wantLevel, line)
			}
			if tt.wantCode < 400 {
				return
			}
			if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("content type %q", ct)
			}
			var body cove.ErrorBody
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
				t.Fatal(err)
			}
			if body.Code != tt.wantCode || !strings.HasPrefix(body.Message, tt.wantMessage) || body.RequestID != echoed {
				t.Errorf("body %+v, want code %d, message %q…, request id %q", body, tt.wantCode, tt.wantMessage, echoed)
			}
		})
	}
	t.Run("the access line names the route that served the request", func(t *testing.T) {
		logs.Reset()
		req := httptest.NewRequest(http.MethodGet, "/widgets/w2", nil)
		req.Header.Set("X-Team", "t1")
		h.ServeHTTP(httptest.NewRecorder(), req)
		if !strings.Contains(logs.String(), `"http.route":"GET /widgets/{id}"`) || !strings.Contains(logs.String(), `"team.id":"t1"`) {
			t.Errorf("access line %s", logs.String())
		}
	})
}

func TestAChainWithoutAnAuthenticatorRefusesEveryLevelButNone(t *testing.T) {
	h := httpx.Chain{Edge: "closed"}.Then(httpx.AuthTeam, func(w http.ResponseWriter, r *http.Request) error {
		t.Error("the handler ran without authentication")
		return nil
	})
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/x", nil)
	req = req.WithContext(telemetry.WithRequestID(req.Context(), "req-outer"))
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusUnauthorized || !strings.Contains(rec.Body.String(), `"requestId":"req-outer"`) {
		t.Errorf("%d %s", rec.Code, rec.Body)
	}
}

func TestAnEdgeAnswersInItsOwnShapeAndCountsItsRequests(t *testing.T) {
	var counted []int
	h := httpx.Chain{
		Edge: "pages",
		Fail: func(w http.ResponseWriter, r *http.Request, err error) {
			http.Error(w, "page: "+err.Error(), errdefs.Status(err))
		},
		Done: func(r *http.Request, status int, note *httpx.Note) { counted = append(counted, status) },
	}.Then(httpx.AuthNone, func(w http.ResponseWriter, r *http.Request) error {
		return fmt.Errorf("page gone: %w", errdefs.ErrNotFound)
	})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/p", nil))
	if rec.Code != http.StatusNotFound || !strings.HasPrefix(rec.Body.String(), "page: page gone") || len(counted) != 1 || counted[0] != http.StatusNotFound {
		t.Errorf("%d %q, counted %v", rec.Code, rec.Body, counted)
	}
}
