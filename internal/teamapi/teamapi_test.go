package teamapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/authz"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/teamapi"
	"github.com/cove-dev/cove/internal/telemetry"
)

func TestStatusOfMapsEveryErrorKindOnce(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want int
	}{
		{"a bad request is 400", teamapi.BadRequest("since: %v", "not a time"), http.StatusBadRequest},
		{"a forged page token is 400", fmt.Errorf("list: %w", store.ErrBadCursor), http.StatusBadRequest},
		{"no team is 401", fmt.Errorf("%w: no team", teamapi.ErrUnauthorized), http.StatusUnauthorized},
		{"a missing record is 404", fmt.Errorf("webhook w1: %w", store.ErrNotFound), http.StatusNotFound},
		{"a conflict is 409", fmt.Errorf("name taken: %w", store.ErrConflict), http.StatusConflict},
		{"anything else is 500", errors.New("disk on fire"), http.StatusInternalServerError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := teamapi.StatusOf(tt.err); got != tt.want {
				t.Errorf("StatusOf(%v) = %d, want %d", tt.err, got, tt.want)
			}
		})
	}
}

func TestAMuxAnswersWithTheTeamOrAnE2BError(t *testing.T) {
	var logs bytes.Buffer
	logger := telemetry.NewLogger(&logs, slog.LevelInfo)
	team := func(ctx context.Context) (string, bool) {
		id := authz.From(ctx).TeamID
		return id, id != ""
	}
	m := teamapi.New("widgets api", team)
	m.Handle("GET /widgets/{id}", func(w http.ResponseWriter, r *http.Request, teamID string) error {
		switch r.PathValue("id") {
		case "missing":
			return fmt.Errorf("widget missing: %w", store.ErrNotFound)
		case "broken":
			return errors.New("disk on fire")
		case "bad":
			return teamapi.BadRequest("id %q is not a widget", "bad")
		}
		teamapi.WriteJSON(w, http.StatusOK, map[string]string{"team": teamID, "id": r.PathValue("id")})
		return nil
	})
	tests := []struct {
		name        string
		path        string
		team        string
		requestID   string // sent by the client; "" lets the mux mint one
		wantCode    int
		wantMessage string
		wantLogged  bool
	}{
		{"a team's request reaches the handler with its team", "/widgets/w1", "t1", "req-1", http.StatusOK, "", false},
		{"a request without a team is 401 before the handler", "/widgets/w1", "", "req-2", http.StatusUnauthorized, "unauthorized: no team for this request (request id req-2)", false},
		{"a missing record is 404 naming the request id", "/widgets/missing", "t1", "req-3", http.StatusNotFound, "widget missing: not found (request id req-3)", false},
		{"a bad request is 400 naming what is wrong", "/widgets/bad", "t1", "req-4", http.StatusBadRequest, `bad request: id "bad" is not a widget (request id req-4)`, false},
		{"a server error is 500 and logged with the route", "/widgets/broken", "t1", "req-5", http.StatusInternalServerError, "disk on fire (request id req-5)", true},
		{"a request without an id gets one minted", "/widgets/missing", "t1", "", http.StatusNotFound, "widget missing: not found (request id ", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			logs.Reset()
			req := httptest.NewRequest(http.MethodGet, tt.path, nil)
			ctx := telemetry.WithLogger(req.Context(), logger)
			if tt.team != "" {
				ctx = authz.With(ctx, authz.Caller{TeamID: tt.team, KeyID: "k1"})
			}
			req = req.WithContext(ctx)
			if tt.requestID != "" {
				req.Header.Set(telemetry.HeaderRequestID, tt.requestID)
			}
			rec := httptest.NewRecorder()
			m.ServeHTTP(rec, req)
			if rec.Code != tt.wantCode {
				t.Fatalf("status %d, want %d: %s", rec.Code, tt.wantCode, rec.Body)
			}
			if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("content type %q", ct)
			}
			echoed := rec.Header().Get(telemetry.HeaderRequestID)
			if echoed == "" || (tt.requestID != "" && echoed != tt.requestID) {
				t.Errorf("request id header %q, want %q (or a minted one)", echoed, tt.requestID)
			}
			if tt.wantCode == http.StatusOK {
				if !strings.Contains(rec.Body.String(), `"team":"t1"`) {
					t.Errorf("body %s", rec.Body)
				}
				return
			}
			var body teamapi.ErrorBody
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
				t.Fatal(err)
			}
			if body.Code != tt.wantCode || !strings.HasPrefix(body.Message, tt.wantMessage) || body.RequestID != echoed {
				t.Errorf("body %+v, want code %d, message %q…, request id %q", body, tt.wantCode, tt.wantMessage, echoed)
			}
			if strings.Count(body.Message, echoed) != 1 {
				t.Errorf("the request id appears %d times in %q", strings.Count(body.Message, echoed), body.Message)
			}
			logged := strings.Contains(logs.String(), `"msg":"widgets api"`) && strings.Contains(logs.String(), `"http.route":"GET /widgets/{id}"`)
			if logged != tt.wantLogged {
				t.Errorf("logged %v, want %v: %s", logged, tt.wantLogged, logs.String())
			}
		})
	}
}

func TestAMuxWithoutATeamSourceRefusesEveryone(t *testing.T) {
	m := teamapi.New("closed api", nil)
	m.Handle("GET /x", func(w http.ResponseWriter, r *http.Request, teamID string) error {
		t.Error("the handler ran without a team")
		return nil
	})
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/x", nil)
	req = req.WithContext(telemetry.WithRequestID(authz.With(req.Context(), authz.Caller{TeamID: "t1", KeyID: "k1"}), "req-outer"))
	m.ServeHTTP(rec, req)
	if rec.Code != http.StatusUnauthorized || !strings.Contains(rec.Body.String(), `"requestId":"req-outer"`) {
		t.Errorf("%d %s", rec.Code, rec.Body)
	}
}

func TestQueryParametersAreReadOnceForEveryTeamAPI(t *testing.T) {
	tests := []struct {
		name, query string
		read        func(url.Values) (any, error)
		want        any
		wantErr     string
	}{
		{"an absent limit is the default", "", limit, 100, ""},
		{"a limit in range is kept", "limit=1000", limit, 1000, ""},
		{"a limit past the most is refused naming it", "limit=1001", limit, nil, `limit "1001": want 1..1000`},
		{"a limit that is no number is refused", "limit=ten", limit, nil, `limit "ten": want 1..1000`},
		{"an absent choice is the first", "", direction, "forward", ""},
		{"a listed choice is kept", "direction=backward", direction, "backward", ""},
		{"another value is refused naming the choices", "direction=up", direction, nil, `direction "up": want forward or backward`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, err := url.ParseQuery(tt.query)
			if err != nil {
				t.Fatal(err)
			}
			got, err := tt.read(q)
			switch {
			case tt.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || teamapi.StatusOf(err) != http.StatusBadRequest {
					t.Errorf("got %v, %v; want a 400 saying %q", got, err, tt.wantErr)
				}
			case err != nil || got != tt.want:
				t.Errorf("got %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func limit(q url.Values) (any, error) {
	n, err := teamapi.Limit(q, 100, 1000)
	if err != nil {
		return nil, err
	}
	return n, nil
}

func direction(q url.Values) (any, error) {
	s, err := teamapi.OneOf(q, "direction", "forward", "backward")
	if err != nil {
		return nil, err
	}
	return s, nil
}

func TestACursorReadsBackItsPositionAndRefusesForgeries(t *testing.T) {
	at := time.Date(2026, 12, 4, 8, 0, 0, 123456000, time.UTC)
	tok := teamapi.EncodeCursor(at, "ev_1:x")
	if got, key, err := teamapi.DecodeCursor(tok); err != nil || !got.Equal(at) || key != "ev_1:x" {
		t.Errorf("DecodeCursor(EncodeCursor) = %v, %q, %v", got, key, err)
	}
	for _, bad := range []string{"!!", "MTIz", teamapi.EncodeCursor(at, "")} {
		if _, _, err := teamapi.DecodeCursor(bad); err == nil {
			t.Errorf("DecodeCursor(%q) accepted a token EncodeCursor never makes", bad)
		}
	}
}
