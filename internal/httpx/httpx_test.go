package httpx_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/errdefs"
	"github.com/cove-dev/cove/internal/httpx"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	cove "github.com/cove-dev/cove/sdk"
)

func TestTheRequestIDIsSettledOnceAndEchoed(t *testing.T) {
	tests := []struct {
		name   string
		header map[string]string
		outer  string // an outer edge's id in the context
		want   string // "" for a minted one
	}{
		{"the client's E2B header is kept", map[string]string{telemetry.HeaderRequestID: "req-e2b"}, "", "req-e2b"},
		{"the client's X-Request-Id is kept", map[string]string{telemetry.HeaderRequestIDAlt: "req-alt"}, "", "req-alt"},
		{"an outer edge's id wins over the header", map[string]string{telemetry.HeaderRequestID: "req-e2b"}, "req-outer", "req-outer"},
		{"without one, one is minted", nil, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			var seen string
			h := httpx.RequestIDs(telemetry.NewLogger(&logs, nil), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				seen = telemetry.RequestID(r.Context())
				telemetry.Logger(r.Context()).Info("inside")
			}))
			req := httptest.NewRequest(http.MethodGet, "/x", nil)
			for k, v := range tt.header {
				req.Header.Set(k, v)
			}
			if tt.outer != "" {
				req = req.WithContext(telemetry.WithRequestID(req.Context(), tt.outer))
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			echoed := rec.Header().Get(telemetry.HeaderRequestID)
			if seen == "" || echoed != seen || (tt.want != "" && seen != tt.want) {
				t.Errorf("handler saw %q, echoed %q, want %q", seen, echoed, tt.want)
			}
			if !strings.Contains(logs.String(), `"request_id":"`+seen+`"`) {
				t.Errorf("the logger does not log the id: %s", logs.String())
			}
		})
	}
}

func TestRecoverAnswersAPanicWithTheRequestID(t *testing.T) {
	tests := []struct {
		name       string
		handler    http.HandlerFunc
		wantStatus int
		wantAbort  bool
	}{
		{"a panic before any answer is a 500 naming the request id", func(w http.ResponseWriter, r *http.Request) { panic("nil map") }, http.StatusInternalServerError, false},
		{"a panic after the answer began cuts the connection", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusOK)
			panic(fmt.Errorf("half way"))
		}, http.StatusOK, true},
		{"a deliberate abort passes through", func(w http.ResponseWriter, r *http.Request) { panic(http.ErrAbortHandler) }, http.StatusOK, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			h := httpx.RequestIDs(telemetry.NewLogger(&logs, nil), httpx.Recover(tt.handler))
			req := httptest.NewRequest(http.MethodPost, "/boom", nil)
			req.Header.Set(telemetry.HeaderRequestID, "req-panic")
			rec := httptest.NewRecorder()
			aborted := func() (aborted bool) {
				defer func() { aborted = recover() == http.ErrAbortHandler }()
				h.ServeHTTP(rec, req)
				return false
			}()
			if aborted != tt.wantAbort || rec.Code != tt.wantStatus {
				t.Fatalf("aborted %v status %d, want %v %d", aborted, rec.Code, tt.wantAbort, tt.wantStatus)
			}
			if tt.wantStatus == http.StatusInternalServerError {
				var body cove.ErrorBody
				if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || body.RequestID != "req-panic" ||
					!strings.Contains(body.Message, "POST /boom failed in the server (request id req-panic)") {
					t.Errorf("body %s (%v)", rec.Body, err)
				}
			}
			if tt.handler != nil && !strings.Contains(tt.name, "deliberate") &&
				(!strings.Contains(logs.String(), `"msg":"handler panic"`) || !strings.Contains(logs.String(), `"request_id":"req-panic"`)) {
				t.Errorf("the panic was not logged with the request id: %s", logs.String())
			}
		})
	}
}

func TestWriteErrorUsesTheOneMapping(t *testing.T) {
	tests := []struct {
		name     string
		err      error
		want     int
		wantAuth bool
	}{
		{"a not-found kind is 404", errdefs.New(errdefs.ErrNotFound, "sandbox i1 not found"), http.StatusNotFound, false},
		{"unauthenticated is 401 saying how to authenticate", errdefs.New(errdefs.ErrUnauthenticated, "missing API key"), http.StatusUnauthorized, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			ctx := telemetry.WithRequestID(t.Context(), "req-w")
			httpx.WriteError(ctx, rec, tt.err)
			var body cove.ErrorBody
			_ = json.Unmarshal(rec.Body.Bytes(), &body)
			if rec.Code != tt.want || body.Code != tt.want || body.Message != tt.err.Error()+" (request id req-w)" {
				t.Errorf("%d %s", rec.Code, rec.Body)
			}
			if (rec.Header().Get("WWW-Authenticate") != "") != tt.wantAuth {
				t.Errorf("WWW-Authenticate %q", rec.Header().Get("WWW-Authenticate"))
			}
		})
	}
}

func TestTheRecorderReportsWhatWasWritten(t *testing.T) {
	rec := &httpx.Recorder{ResponseWriter: httptest.NewRecorder()}
	if rec.StatusOr(299) != 299 {
		t.Error("an untouched recorder does not give the default")
	}
	_, _ = rec.Write([]byte("hello"))
	rec.WriteHeader(http.StatusTeapot)
	rec.Flush()
	if rec.Status != http.StatusOK || rec.Bytes != 5 || rec.Unwrap() == nil {
		t.Errorf("status %d bytes %d", rec.Status, rec.Bytes)
	}
	attrs := httpx.AccessAttrs(httptest.NewRequest(http.MethodGet, "/p", nil), 204, time.Now())
	want := []any{"http.request.method", "GET", "url.path", "/p", "http.response.status_code", 204}
	for i, w := range want {
		if attrs[i] != w {
			t.Errorf("access attrs %v, want them to start %v", attrs, want)
		}
	}
	if httpx.StatusClass(404) != "4xx" {
		t.Error("status class")
	}
}

func TestANoteCarriesWhatHandlersLearnToTheAccessLine(t *testing.T) {
	ctx, note := httpx.WithNote(t.Context())
	httpx.NoteFrom(ctx).Add(telemetry.KeySandboxID, "i1")
	httpx.NoteFrom(ctx).Err = errdefs.ErrNotFound
	if len(note.Attrs) != 2 || note.Attrs[1] != "i1" || note.Err != errdefs.ErrNotFound {
		t.Errorf("note %+v", note)
	}
	httpx.NoteFrom(t.Context()).Add("lost", 1) // no note: a throwaway, not a panic
}

func TestEveryEdgeLogsItsAccessLineByOneRule(t *testing.T) {
	for _, tt := range []struct {
		name   string
		status int
		err    error
		want   string
	}{
		{"an answer is INFO", http.StatusOK, nil, "INFO"},
		{"the client's mistake is INFO, named", http.StatusBadRequest, errors.New("bad field"), "INFO"},
		{"the server's own failure is ERROR", http.StatusInternalServerError, errors.New("boom"), "ERROR"},
		{"an upstream that failed is WARN", http.StatusBadGateway, errors.New("sandbox killed"), "WARN"},
		{"a client gone is WARN", errdefs.StatusClientClosed, errors.New("client went away"), "WARN"},
		{"a stream cut after its answer began is WARN", http.StatusOK, errors.New("response cut"), "WARN"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := httpx.AccessLevel(tt.status, tt.err).String(); got != tt.want {
				t.Errorf("AccessLevel(%d, %v) = %s, want %s", tt.status, tt.err, got, tt.want)
			}
		})
	}
	t.Run("an edge served through the chain logs one, with the request id", func(t *testing.T) {
		var logs bytes.Buffer
		h := httpx.Chain{Edge: "console", Logger: telemetry.NewLogger(&logs, nil)}.Then(httpx.AuthNone, func(w http.ResponseWriter, r *http.Request) error {
			http.Error(w, "nope", http.StatusForbidden)
			return nil
		})
		req := httptest.NewRequest(http.MethodGet, "/dashboard/nodes", nil)
		req.Header.Set(telemetry.HeaderRequestID, "req-console")
		h.ServeHTTP(httptest.NewRecorder(), req)
		line := logs.String()
		for _, want := range []string{`"msg":"console request"`, `"request_id":"req-console"`, `"http.response.status_code":403`, `"url.path":"/dashboard/nodes"`, `"level":"INFO"`} {
			if !strings.Contains(line, want) {
				t.Errorf("the access line lacks %s: %s", want, line)
			}
		}
	})
}
