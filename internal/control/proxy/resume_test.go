package proxy_test

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/cove-dev/cove/internal/control/proxy"
	"github.com/cove-dev/cove/internal/store"
)

// TestAPausedSecureSandboxIsResumedOnlyWithItsToken: envd of a paused secure sandbox with
// auto-resume answers a request without its access token as envd would, without resuming it.
func TestAPausedSecureSandboxIsResumedOnlyWithItsToken(t *testing.T) {
	e := newEnv(t)
	e.backend.serve(t, &store.Sandbox{ID: "isecauto", Secure: true, EnvdAccessToken: "tok-a", State: store.StatePaused, AutoResume: true},
		proxy.EnvdPort, echo("resumed"))
	state := func() store.SandboxState {
		sb, err := e.backend.Lookup(context.Background(), "isecauto")
		if err != nil {
			t.Fatal(err)
		}
		return sb.State
	}
	for _, tt := range []struct {
		name, token string
		rpc         bool
		status      int
		code        string // a Connect error's
		message     string
	}{
		{name: "a request without the token is 401 missing access token", status: 401, message: "missing access token"},
		{name: "a request with another token is 401 invalid access token", token: "tok-b", status: 401, message: "invalid access token"},
		{name: "an RPC without the token is Connect unauthenticated", rpc: true, status: 401, code: "unauthenticated", message: "missing access token"},
	} {
		t.Run(tt.name+", and the sandbox stays paused", func(t *testing.T) {
			h := []string{"E2b-Sandbox-Id", "isecauto"}
			if tt.token != "" {
				h = append(h, proxy.HeaderAccessToken, tt.token)
			}
			method, path, body := "GET", "/envs", io.Reader(nil)
			if tt.rpc {
				method, path, body = "POST", "/filesystem.Filesystem/Stat", strings.NewReader("{}")
				h = append(h, "Content-Type", "application/json")
			}
			res := e.request(t, method, path, body, h...)
			got := decode(t, res)
			msg, _ := got["message"].(string)
			if res.StatusCode != tt.status || !strings.Contains(msg, tt.message) || (tt.code != "" && got["code"] != tt.code) {
				t.Errorf("status %d body %v, want %d %q %s", res.StatusCode, got, tt.status, tt.message, tt.code)
			}
			if s := state(); s != store.StatePaused {
				t.Fatalf("the sandbox is %s, want paused", s)
			}
		})
	}
	t.Run("a request with the token resumes it", func(t *testing.T) {
		res := e.request(t, "GET", "/envs", nil, "E2b-Sandbox-Id", "isecauto", proxy.HeaderAccessToken, "tok-a")
		res.Body.Close()
		if res.StatusCode != 200 || state() != store.StateRunning {
			t.Fatalf("status %d, state %s: want 200 and running", res.StatusCode, state())
		}
	})
}
