package server

import (
	"net/http"
	"regexp"
	"testing"

	"github.com/cove-dev/cove/internal/covetest"
)

// TestPrivatePortsDoNotAutoResume: a request without the traffic token to a paused sandbox
// whose ports are private (allowPublicTraffic false) with auto-resume on gets the answer a
// running one gives, and the sandbox stays paused, also after the server restarted; with the
// token it is resumed.
func TestPrivatePortsDoNotAutoResume(t *testing.T) {
	for _, tc := range []struct {
		name    string
		restart func(*covetest.Server)
	}{
		{"on the server that made it", func(*covetest.Server) {}},
		{"after the server crashed and started again", func(s *covetest.Server) { s.Crash(); s.Restart() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := covetest.StartWith(t, "", covetest.Options{OnStop: "keep"})
			cl := func() client { return client{t: t, url: s.URL, key: s.Key} } // the URL changes with a restart
			code, created, _ := cl().do(http.MethodPost, "/sandboxes", map[string]any{"templateID": "base", "autoResume": map[string]any{"enabled": true},
				"network": map[string]any{"allowPublicTraffic": false}})
			if code != http.StatusCreated {
				t.Fatalf("create: %d %v", code, created)
			}
			id := created["sandboxID"].(string)
			token, _ := created["trafficAccessToken"].(string)
			if token == "" {
				t.Fatalf("create did not return a traffic access token: %v", created)
			}
			port := func(headers ...string) (int, string) {
				code, body, _ := cl().do(http.MethodGet, "/", nil, append([]string{"E2b-Sandbox-Id", id, "E2b-Sandbox-Port", "8000"}, headers...)...)
				msg, _ := body["message"].(string)
				return code, requestIDNote.ReplaceAllString(msg, "")
			}
			state := func() string { return stateOf(cl(), id) }
			runningCode, runningMsg := port()
			if runningCode != http.StatusForbidden {
				t.Fatalf("a running sandbox's private port without the token: %d %q, want 403", runningCode, runningMsg)
			}
			if code, body, _ := cl().do(http.MethodPost, "/sandboxes/"+id+"/pause", nil); code != http.StatusNoContent {
				t.Fatalf("pause: %d %v", code, body)
			}
			tc.restart(s)
			for _, req := range []struct {
				name    string
				headers []string
			}{
				{"no token", nil},
				{"a wrong token", []string{"E2b-Traffic-Access-Token", "not-" + token}},
			} {
				t.Run("a request with "+req.name+" gets the running sandbox's answer and does not resume it", func(t *testing.T) {
					if code, msg := port(req.headers...); code != runningCode || msg != runningMsg {
						t.Errorf("%d %q, want %d %q", code, msg, runningCode, runningMsg)
					}
					if got := state(); got != "paused" {
						t.Fatalf("the sandbox is %s after a request without its token, want paused", got)
					}
				})
			}
			t.Run("getInfo still says its ports are private", func(t *testing.T) {
				_, info, _ := cl().do(http.MethodGet, "/sandboxes/"+id, nil)
				if netw, _ := info["network"].(map[string]any); netw["allowPublicTraffic"] != false {
					t.Errorf("network %v, want allowPublicTraffic false", info["network"])
				}
			})
			t.Run("a request with the token resumes it", func(t *testing.T) {
				port("E2b-Traffic-Access-Token", token) // nothing listens on 8000: a 502 once it runs
				if got := state(); got != "running" {
					t.Fatalf("the sandbox is %s after a request with its token, want running", got)
				}
			})
		})
	}
}

// TestSecureSandboxDoesNotAutoResumeWithoutItsAccessToken: a request to envd of a paused
// secure sandbox with auto-resume on, without its access token, gets envd's answer for a
// running one and leaves it paused; with the token it is resumed.
func TestSecureSandboxDoesNotAutoResumeWithoutItsAccessToken(t *testing.T) {
	s := covetest.StartWith(t, "", covetest.Options{OnStop: "kill"})
	cl := client{t: t, url: s.URL, key: s.Key}
	code, created, _ := cl.do(http.MethodPost, "/sandboxes", map[string]any{"templateID": "base", "secure": true, "autoResume": map[string]any{"enabled": true}})
	if code != http.StatusCreated {
		t.Fatalf("create: %d %v", code, created)
	}
	id := created["sandboxID"].(string)
	token, _ := created["envdAccessToken"].(string)
	envd := func(headers ...string) (int, string) {
		code, body, _ := cl.do(http.MethodGet, "/envs", nil, append([]string{"E2b-Sandbox-Id", id, "E2b-Sandbox-Port", "49983"}, headers...)...)
		msg, _ := body["message"].(string)
		return code, requestIDNote.ReplaceAllString(msg, "")
	}
	state := func() string { return stateOf(cl, id) }
	type answer struct {
		code int
		msg  string
	}
	running := map[string]answer{}
	cases := []struct {
		name    string
		headers []string
	}{
		{"no access token", nil},
		{"a wrong access token", []string{"X-Access-Token", "not-" + token}},
	}
	for _, c := range cases {
		code, msg := envd(c.headers...)
		if code != http.StatusUnauthorized {
			t.Fatalf("envd of the running sandbox with %s: %d %q, want 401", c.name, code, msg)
		}
		running[c.name] = answer{code, msg}
	}
	if code, body, _ := cl.do(http.MethodPost, "/sandboxes/"+id+"/pause", nil); code != http.StatusNoContent {
		t.Fatalf("pause: %d %v", code, body)
	}
	for _, c := range cases {
		t.Run("a request with "+c.name+" gets envd's answer and does not resume it", func(t *testing.T) {
			if code, msg := envd(c.headers...); (answer{code, msg}) != running[c.name] {
				t.Errorf("%d %q, want %+v", code, msg, running[c.name])
			}
			if got := state(); got != "paused" {
				t.Fatalf("the sandbox is %s, want paused", got)
			}
		})
	}
	t.Run("a request with the access token resumes it", func(t *testing.T) {
		if code, msg := envd("X-Access-Token", token); code != http.StatusOK {
			t.Errorf("%d %q, want 200", code, msg)
		}
		if got := state(); got != "running" {
			t.Fatalf("the sandbox is %s, want running", got)
		}
	})
}

// requestIDNote is the request id an error message ends with: it differs between two answers.
var requestIDNote = regexp.MustCompile(` \(request id [^)]*\)`)

// stateOf is sandbox id's state as getInfo reports it.
func stateOf(cl client, id string) string {
	_, body, _ := cl.do(http.MethodGet, "/sandboxes/"+id, nil)
	s, _ := body["state"].(string)
	return s
}
