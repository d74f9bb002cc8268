package server

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/covetest"
	"github.com/cove-dev/cove/internal/sandbox/runtime"
)

// TestProxyAsTheSDKSeesIt runs test/compat/proxy.test.mjs: a killed sandbox's open command
// raises the SDK's own TimeoutError, a gone sandbox's port answers E2B's exact 502 body, and a
// server in a sandbox never sees Cove's credentials; on each runtime.
func TestProxyAsTheSDKSeesIt(t *testing.T) {
	covetest.EachRuntime(t, func(t *testing.T, _ runtime.Engine) {
		s := covetest.Start(t, "")
		covetest.RunSDKScenarios(t, "proxy.test.mjs", s.URL, s.Key)
	})
}

// TestAPausedSecureSandboxsPortDoesNotResumeWithoutItsToken: a request to a user's port of a
// paused secure sandbox with auto-resume is 401 without its access token and leaves it
// paused; with the token it resumes it.
func TestAPausedSecureSandboxsPortDoesNotResumeWithoutItsToken(t *testing.T) {
	s := covetest.Start(t, "")
	cl := client{t: t, url: s.URL, key: s.Key}
	code, created, _ := cl.do(http.MethodPost, "/sandboxes", map[string]any{"templateID": "base", "secure": true, "autoResume": map[string]any{"enabled": true}})
	if code != http.StatusCreated {
		t.Fatalf("create: %d %v", code, created)
	}
	id := created["sandboxID"].(string)
	token, _ := created["envdAccessToken"].(string)
	if code, body, _ := cl.do(http.MethodPost, "/sandboxes/"+id+"/pause", nil); code != http.StatusNoContent {
		t.Fatalf("pause: %d %v", code, body)
	}
	port := func(headers ...string) (int, map[string]any) {
		code, body, _ := client{t: t, url: s.URL}.do(http.MethodGet, "/", nil, append([]string{"E2b-Sandbox-Id", id, "E2b-Sandbox-Port", "8000"}, headers...)...)
		return code, body
	}
	for _, c := range []struct{ name, token string }{{"no access token", ""}, {"a wrong access token", "not-" + token}} {
		t.Run("a request with "+c.name+" is 401 and does not resume it", func(t *testing.T) {
			var h []string
			if c.token != "" {
				h = []string{"X-Access-Token", c.token}
			}
			if code, body := port(h...); code != http.StatusUnauthorized {
				t.Errorf("%d %v, want 401", code, body)
			}
			if got := stateOf(cl, id); got != "paused" {
				t.Fatalf("the sandbox is %s, want paused", got)
			}
		})
	}
	t.Run("a request with the access token resumes it", func(t *testing.T) {
		port("X-Access-Token", token) // nothing listens on 8000: a 502 once it runs
		if got := stateOf(cl, id); got != "running" {
			t.Fatalf("the sandbox is %s, want running", got)
		}
	})
}

// TestAStreamOpenAtAServerStopEndsNamingTheStop: a command's Connect stream through the proxy
// that is open when the server stops ends with an end-stream error, code unavailable, naming
// the stop, not with a cut ("incomplete envelope").
func TestAStreamOpenAtAServerStopEndsNamingTheStop(t *testing.T) {
	s := covetest.StartWith(t, "", covetest.Options{OnStop: "keep"})
	cl := client{t: t, url: s.URL, key: s.Key}
	code, created, _ := cl.do(http.MethodPost, "/sandboxes", map[string]any{"templateID": "base"}) // the cleanup's restart kills it
	if code != http.StatusCreated {
		t.Fatalf("create: %d %v", code, created)
	}
	id := created["sandboxID"].(string)
	msg, _ := json.Marshal(map[string]any{"process": map[string]any{"cmd": "/bin/sleep", "args": []string{"60"}}})
	env := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(env[1:], uint32(len(msg)))
	req, _ := http.NewRequest(http.MethodPost, s.URL+"/process.Process/Start", bytes.NewReader(append(env, msg...)))
	req.Header.Set("E2b-Sandbox-Id", id)
	req.Header.Set("Content-Type", "application/connect+json")
	req.Header.Set("Connect-Protocol-Version", "1")
	req.Header.Set("Authorization", "Basic dXNlcjo=") // user, as the SDK sends it
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(res.Body)
		t.Fatalf("start: %d %s", res.StatusCode, b)
	}
	first := make([]byte, 5)
	if _, err := io.ReadFull(res.Body, first); err != nil { // the start event's header
		t.Fatal(err)
	}
	if _, err := io.CopyN(io.Discard, res.Body, int64(binary.BigEndian.Uint32(first[1:]))); err != nil {
		t.Fatal(err)
	}
	stopped := make(chan struct{})
	go func() { s.Stop(); close(stopped) }()
	t.Cleanup(func() { <-stopped })
	done := make(chan []byte, 1)
	go func() {
		rest, err := io.ReadAll(res.Body)
		if err != nil {
			t.Errorf("the stream was cut (%v) instead of ending with an error", err)
		}
		done <- rest
	}()
	var rest []byte
	select {
	case rest = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the stream did not end at the server's stop")
	}
	if len(rest) < 5 || rest[0] != 0x02 {
		t.Fatalf("after the stop: %q, want an end-stream frame", rest)
	}
	var end struct {
		Error struct{ Code, Message string }
	}
	if err := json.Unmarshal(rest[5:], &end); err != nil {
		t.Fatalf("end-stream frame %q: %v", rest[5:], err)
	}
	if end.Error.Code != "unavailable" || !strings.Contains(end.Error.Message, "Cove server is stopping") {
		t.Errorf("end-stream error %+v, want unavailable naming the server's stop", end.Error)
	}
}
