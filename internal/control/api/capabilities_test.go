package api_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/cove-dev/cove/internal/control/api"

	"github.com/cove-dev/cove/sdk/reason"
)

// TestAPauseReachesTheBackendAsAsked: PauseWith is part of Sandboxes, so the way a client
// asks to pause is never dropped for the server's default.
func TestAPauseReachesTheBackendAsAsked(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, body string
		want       reason.PauseKind
	}{
		{"no body pauses the server's default way", "", ""},
		{"memory false asks a pause that keeps only the files", `{"memory":false}`, reason.PauseFilesystem},
		{"kind freeze asks a freeze", `{"kind":"freeze"}`, reason.PauseFreeze},
		{"kind snapshot asks a snapshot", `{"kind":"snapshot"}`, reason.PauseSnapshot},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, "")
			if res := e.do(t, http.MethodPost, "/sandboxes/irunning/pause", tt.body); res.status != http.StatusNoContent {
				t.Fatalf("pause: %d %s", res.status, res.body)
			}
			e.fake.mu.Lock()
			defer e.fake.mu.Unlock()
			if len(e.fake.pauses) != 1 || e.fake.pauses[0] != tt.want {
				t.Errorf("the backend was asked %q, want one pause of kind %q", e.fake.pauses, tt.want)
			}
		})
	}
}

// TestWhatAServerDoesNotDeclareItDoesNotServe: forks, snapshots and volumes are served when
// the server's wiring declares them (Config.Durable, Config.Volumes), whatever else its
// Sandboxes implements; otherwise they are the 501 of operations it does not serve.
func TestWhatAServerDoesNotDeclareItDoesNotServe(t *testing.T) {
	t.Parallel()
	// Its Sandboxes forks and keeps snapshots too: it is not asked.
	e := &env{fake: newFake(), logs: &logBuffer{}}
	srv := httptest.NewServer(api.New(api.Config{Sandboxes: forkingFake{e.fake}, Keys: fakeKeys{}}))
	t.Cleanup(srv.Close)
	e.url = srv.URL
	for _, call := range []struct{ method, path, body string }{
		{http.MethodPost, "/sandboxes/irunning/fork", `{"count":1}`},
		{http.MethodPost, "/sandboxes/irunning/snapshots", `{}`},
		{http.MethodGet, "/snapshots", ""},
		{http.MethodGet, "/volumes", ""},
		{http.MethodPost, "/volumes", `{"name":"v"}`},
	} {
		t.Run(call.method+" "+call.path+" is not implemented", func(t *testing.T) {
			t.Parallel()
			if res := e.do(t, call.method, call.path, call.body); res.status != http.StatusNotImplemented {
				t.Errorf("%d %s, want 501", res.status, res.body)
			}
		})
	}
}
