package proxy_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/control/proxy"
	"github.com/cove-dev/cove/internal/store"
)

// headerEcho answers with the request's headers, as a user's server in the sandbox sees them.
func headerEcho() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(r.Header)
	})
}

func TestCoveCredentialsNeverReachAUserPort(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.backend.serve(t, &store.Sandbox{ID: "icreds", Secure: true, EnvdAccessToken: "envd-tok-1234"}, 8080, headerEcho())
	const key = "e2b_0123456789abcdef0123456789abcdef01234567"
	tests := []struct {
		name   string
		header []string // pairs sent
		gone   []string // headers the user's server must not see
		want   map[string]string
	}{
		{name: "the API key in X-API-Key is stripped", header: []string{"X-API-Key", key}, gone: []string{"X-Api-Key"}},
		{name: "the API key as a Bearer is stripped", header: []string{"Authorization", "Bearer " + key}, gone: []string{"Authorization"}},
		{name: "a lower-case bearer scheme is stripped too", header: []string{"Authorization", "bearer " + key}, gone: []string{"Authorization"}},
		{name: "the admin token as a Bearer is stripped", header: []string{"Authorization", "Bearer cove_admin_00ff"}, gone: []string{"Authorization"}},
		{name: "the sandbox's access token as a Bearer is stripped", header: []string{"Authorization", "Bearer envd-tok-1234"}, gone: []string{"Authorization"}},
		{name: "the access token in X-Access-Token is stripped", header: []string{proxy.HeaderAccessToken, "envd-tok-1234"}, gone: []string{"X-Access-Token"}},
		{name: "the traffic token header is stripped", header: []string{proxy.HeaderTrafficToken, "traffic"}, gone: []string{"E2b-Traffic-Access-Token"}},
		{name: "the console's session cookie is stripped", header: []string{"Cookie", "cove_session=abc"}, gone: []string{"Cookie"}},
		{name: "Cove's cookies go and the user's stay", header: []string{"Cookie", "theme=dark; cove_session=abc; cove_other=1; sid=42"},
			want: map[string]string{"Cookie": "theme=dark; sid=42"}},
		{name: "the user's own Bearer goes through", header: []string{"Authorization", "Bearer my-app-token"},
			want: map[string]string{"Authorization": "Bearer my-app-token"}},
		{name: "the user's Basic credentials go through", header: []string{"Authorization", "Basic dXNlcjpwdw=="},
			want: map[string]string{"Authorization": "Basic dXNlcjpwdw=="}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := append([]string{"E2b-Sandbox-Id", "icreds", "E2b-Sandbox-Port", "8080", proxy.HeaderAccessToken, "envd-tok-1234"}, tt.header...)
			res := e.request(t, "GET", "/", nil, h...)
			if res.StatusCode != 200 {
				b, _ := io.ReadAll(res.Body)
				t.Fatalf("status %d: %s", res.StatusCode, b)
			}
			var seen http.Header
			if err := json.NewDecoder(res.Body).Decode(&seen); err != nil {
				t.Fatal(err)
			}
			for _, name := range append(tt.gone, "X-Access-Token") {
				if v := seen.Values(name); len(v) > 0 {
					t.Errorf("the user's server got %s: %q", name, v)
				}
			}
			for name, v := range tt.want {
				if got := strings.Join(seen.Values(name), ", "); got != v {
					t.Errorf("the user's server got %s %q, want %q", name, got, v)
				}
			}
		})
	}
}

// TestAPausedSecureSandboxsPortsResumeOnlyWithItsToken: a request to a user's port of a
// paused secure sandbox with auto-resume is refused 401 without resuming it, unless it
// carries the sandbox's access token.
func TestAPausedSecureSandboxsPortsResumeOnlyWithItsToken(t *testing.T) {
	e := newEnv(t)
	e.backend.serve(t, &store.Sandbox{ID: "iportauto", Secure: true, EnvdAccessToken: "tok-a", State: store.StatePaused, AutoResume: true},
		8080, headerEcho())
	state := func() store.SandboxState {
		sb, err := e.backend.Lookup(context.Background(), "iportauto")
		if err != nil {
			t.Fatal(err)
		}
		return sb.State
	}
	for _, tt := range []struct{ name, token, message string }{
		{name: "without the token", message: "missing access token"},
		{name: "with another token", token: "tok-b", message: "invalid access token"},
	} {
		t.Run("a request "+tt.name+" is 401 and the sandbox stays paused", func(t *testing.T) {
			h := []string{"E2b-Sandbox-Id", "iportauto", "E2b-Sandbox-Port", "8080"}
			if tt.token != "" {
				h = append(h, proxy.HeaderAccessToken, tt.token)
			}
			res := e.request(t, "GET", "/", nil, h...)
			got := decode(t, res)
			if msg, _ := got["message"].(string); res.StatusCode != 401 || !strings.Contains(msg, tt.message) {
				t.Errorf("status %d body %v, want 401 %q", res.StatusCode, got, tt.message)
			}
			if s := state(); s != store.StatePaused {
				t.Fatalf("the sandbox is %s, want paused", s)
			}
		})
	}
	t.Run("a request with the token resumes it, and the port does not see the token", func(t *testing.T) {
		res := e.request(t, "GET", "/", nil, "E2b-Sandbox-Id", "iportauto", "E2b-Sandbox-Port", "8080", proxy.HeaderAccessToken, "tok-a")
		var seen http.Header
		if err := json.NewDecoder(res.Body).Decode(&seen); err != nil {
			t.Fatal(err)
		}
		if res.StatusCode != 200 || state() != store.StateRunning {
			t.Fatalf("status %d, state %s: want 200 and running", res.StatusCode, state())
		}
		if v := seen.Get(proxy.HeaderAccessToken); v != "" {
			t.Errorf("the user's server got the access token %q", v)
		}
	})
}

// TestShutdownEndsStreamsNamingTheStop: a Connect stream open when the server stops ends
// with an end-stream frame, code unavailable, saying the server is stopping, not cut short.
func TestShutdownEndsStreamsNamingTheStop(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	next := make(chan string, 1)
	e.backend.serve(t, &store.Sandbox{ID: "istop"}, proxy.EnvdPort, typedStreamer("application/connect+json", next))
	res := e.request(t, "POST", "/process.Process/Start", strings.NewReader("{}"),
		"E2b-Sandbox-Id", "istop", "Content-Type", "application/connect+json", "X-E2B-Request-Id", "rid-stop")
	first := frame(0, `{"event":{}}`)
	next <- first
	got := make([]byte, len(first))
	if _, err := io.ReadFull(res.Body, got); err != nil {
		t.Fatal(err)
	}
	e.proxy.Shutdown()
	done := make(chan []byte, 1)
	go func() {
		rest, err := io.ReadAll(res.Body)
		if err != nil {
			t.Errorf("the stream was aborted (%v) instead of ending with the error", err)
		}
		done <- rest
	}()
	var rest []byte
	select {
	case rest = <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the stream did not end at the shutdown")
	}
	if len(rest) < 5 || rest[0] != 0x02 {
		t.Fatalf("after the shutdown: %q, want one end-stream frame", rest)
	}
	var end struct {
		Error struct{ Code, Message string }
	}
	if err := json.Unmarshal(rest[5:], &end); err != nil {
		t.Fatal(err)
	}
	if end.Error.Code != "unavailable" || !strings.Contains(end.Error.Message, "Cove server is stopping") || !strings.Contains(end.Error.Message, "rid-stop") {
		t.Errorf("end frame error %+v, want unavailable naming the server's stop", end.Error)
	}
}

// TestAPrivateSandboxsPortsNeedItsTrafficToken: the backend's TrafficGuard is part of the
// proxy's contract (Backend), so a private sandbox's ports are never served without its
// traffic token; envd's port answers to its own access token instead.
func TestAPrivateSandboxsPortsNeedItsTrafficToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sb := &store.Sandbox{ID: "iprivate1"}
	e.backend.serve(t, sb, proxy.EnvdPort, echo("envd"))
	e.backend.serve(t, sb, 8080, echo("app"))
	e.backend.serve(t, &store.Sandbox{ID: "ipublic1"}, 8080, echo("public app"))
	e.backend.mu.Lock()
	e.backend.private["iprivate1"], e.backend.masks["iprivate1"] = "traffic-secret", "app.example:${PORT}"
	e.backend.mu.Unlock()
	tests := []struct {
		name   string
		header []string
		status int
		label  string
	}{
		{"a private port without the token is refused", []string{"Host", "8080-iprivate1.cove.test"}, http.StatusForbidden, ""},
		{"a private port with a wrong token is refused", []string{"Host", "8080-iprivate1.cove.test", proxy.HeaderTrafficToken, "guess"}, http.StatusForbidden, ""},
		{"a private port with its token is served", []string{"Host", "8080-iprivate1.cove.test", proxy.HeaderTrafficToken, "traffic-secret"}, http.StatusOK, "app"},
		{"envd's port of a private sandbox needs no traffic token", []string{"Host", "49983-iprivate1.cove.test"}, http.StatusOK, "envd"},
		{"a public sandbox's port needs no token", []string{"Host", "8080-ipublic1.cove.test"}, http.StatusOK, "public app"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := e.request(t, http.MethodGet, "/", nil, tt.header...)
			if res.StatusCode != tt.status {
				t.Fatalf("status %d, want %d", res.StatusCode, tt.status)
			}
			if tt.label == "" {
				return
			}
			got := decode(t, res)
			if got["label"] != tt.label || got["api_key"] != "" {
				t.Errorf("upstream saw %v; want %s, without the traffic token", got, tt.label)
			}
			if tt.label == "app" && got["host"] != "app.example:8080" {
				t.Errorf("upstream saw Host %v; want the sandbox's mask app.example:8080", got["host"])
			}
		})
	}
}
