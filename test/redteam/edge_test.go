package redteam

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	cove "github.com/cove-dev/cove/sdk"
)

// echoServer serves, on port 8080 of a sandbox, the request headers it received as its body.
const echoServer = `cat > /tmp/rt-echo.py <<'PY'
import http.server
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        b = str(self.headers).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("0.0.0.0", 8080), H).serve_forever()
PY
nohup python3 /tmp/rt-echo.py >/dev/null 2>&1 &
for i in $(seq 50); do curl -s -o /dev/null http://127.0.0.1:8080/ && exit 0; sleep 0.1; done; exit 1`

// TestCredentialForwarding sends requests to a user port of a sandbox through Cove's proxy,
// carrying the caller's API key (X-API-Key, Authorization: Bearer), a console session cookie
// and the sandbox's access token: the server in the sandbox must receive none of them.
func TestCredentialForwarding(t *testing.T) {
	need(t)
	defer report(t, classCredentials)
	var created cove.CreatedSandbox
	if code, body := call(env.keyA, http.MethodPost, "/sandboxes", map[string]any{"templateID": "base", "timeout": 300, "secure": true}, &created); code != http.StatusCreated || created.SandboxID == "" {
		t.Fatalf("create: %d %s", code, body)
	}
	t.Cleanup(func() { call(env.keyA, http.MethodDelete, "/sandboxes/"+created.SandboxID, nil, nil) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := client(env.keyA).Connect(ctx, created.SandboxID, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if out, code := sh(t, sb, echoServer, time.Minute); code != 0 {
		t.Fatalf("start the echo server: %d %s", code, out)
	}
	token := created.EnvdAccessToken
	if token == "" {
		t.Fatal("the secure sandbox has no access token")
	}
	const session = "rt-session-9f3a77c1"
	cases := []struct {
		name, secret string
		key          string
		header       http.Header
	}{
		{"X-API-Key", env.keyA, env.keyA, nil},
		{"Authorization: Bearer <key>", env.keyA, "", http.Header{"Authorization": {"Bearer " + env.keyA}}},
		{"a cove_session cookie", session, "", http.Header{"Cookie": {"cove_session=" + session + "; rt-keep=1"}}},
		{"a cove_session cookie among others", session, "", http.Header{"Cookie": {"rt-keep=1; cove_session=" + session}}},
		{"X-Access-Token", token, "", http.Header{"X-Access-Token": {token}}},
		{"Authorization: Bearer <access token>", token, "", http.Header{"Authorization": {"Bearer " + token}}},
	}
	if created.Domain != nil && *created.Domain != "" {
		cases = append(cases, struct {
			name, secret string
			key          string
			header       http.Header
		}{"X-API-Key to a {port}-{id}.{domain} host", env.keyA, env.keyA, http.Header{"Host": {"8080-" + created.SandboxID + "." + *created.Domain}}})
	}
	for _, tc := range cases {
		h := http.Header{"E2b-Sandbox-Id": {created.SandboxID}, "E2b-Sandbox-Port": {"8080"}, "X-Rt-Control": {"arrived"}}
		if tc.header.Get("Host") != "" {
			h = http.Header{"X-Rt-Control": {"arrived"}}
		}
		for k, v := range tc.header {
			h[k] = v
		}
		code, body := callHeaders(tc.key, http.MethodGet, "/rt-creds", nil, nil, h)
		switch {
		case code != http.StatusOK || !strings.Contains(body, "arrived"):
			probe(t, classCredentials, tc.name, false, fmt.Sprintf("the request did not reach the sandbox's server: %d %.200s", code, body))
		default:
			probe(t, classCredentials, tc.name, !strings.Contains(body, tc.secret), "the sandbox's server received it")
		}
	}
}

// TestResourceBounds: a volume far larger than the free disk is refused; a sandbox cannot
// open 200k eventfds; a fork bomb of the user leaves the sandbox answering; a fork-bombed
// sandbox is killed (promptly) and gone, cgroups and all.
func TestResourceBounds(t *testing.T) {
	need(t)
	defer report(t, classBounds)
	t.Run("a volume far larger than the free disk is refused", func(t *testing.T) {
		var st syscall.Statfs_t
		if err := syscall.Statfs(env.server.DataDir, &st); err != nil {
			t.Fatal(err)
		}
		free := int64(st.Bavail) * int64(st.Bsize)
		sizeMB := min(free*8>>20, 1<<20) // the API's own bound is 1 TiB
		var vol cove.Volume
		code, body := call(env.keyA, http.MethodPost, "/volumes", map[string]any{"name": "rt-huge", "sizeMB": sizeMB}, &vol)
		if vol.ID != "" {
			call(env.keyA, http.MethodDelete, "/volumes/"+url.PathEscape(vol.ID), nil, nil)
		}
		probe(t, classBounds, fmt.Sprintf("a volume of %d MiB with %d MiB free", sizeMB, free>>20),
			code == http.StatusInsufficientStorage || (code >= 400 && code < 500), fmt.Sprintf("answered %d %.200s", code, body))
	})
	t.Run("a sandbox cannot open 200k eventfds", func(t *testing.T) {
		sb := sandbox(t, env.keyA, cove.SandboxOptions{Timeout: 5 * time.Minute})
		// Twelve processes, each as far as its own limit lets it: the bound is the sandbox's.
		out, code := sh(t, sb, `cat > /tmp/rt-fds.py <<'PY'
import os, resource, time
s, h = resource.getrlimit(resource.RLIMIT_NOFILE)
try:
    resource.setrlimit(resource.RLIMIT_NOFILE, (h, h))
except Exception:
    pass
fds = []
try:
    while len(fds) < 200000:
        fds.append(os.eventfd(0))
except OSError:
    pass
print(len(fds), flush=True)
time.sleep(8)
PY
for i in $(seq 12); do python3 /tmp/rt-fds.py > /tmp/rt-fds.$i & done; wait
echo opened $(cat /tmp/rt-fds.* | awk '{s += $1} END {print s}')`, 2*time.Minute)
		n := -1
		if _, after, ok := strings.Cut(out, "opened "); ok {
			n, _ = strconv.Atoi(strings.TrimSpace(after))
		}
		t.Logf("the sandbox opened %d eventfds (exit %d)", n, code)
		probe(t, classBounds, "200k eventfds", code != 0 || (n >= 0 && n < 200000), fmt.Sprintf("the sandbox opened %d: exit %d %.200s", n, code, out))
	})
	t.Run("a fork bomb of the user leaves the sandbox answering", func(t *testing.T) {
		// The pids limit stops it (runc's pids cgroup; gVisor's RLIMIT_NPROC, the host's
		// pids.max behind it): its command killed, the sandbox answers again.
		sb := sandbox(t, env.keyA, cove.SandboxOptions{Timeout: 5 * time.Minute})
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		h, err := sb.Commands.Start(ctx, "bomb() { bomb | bomb & }; bomb; exec sleep 60", cove.User("user"))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Second) // the bomb fills the user's pids
		t0 := time.Now()
		kerr := h.Kill(ctx)
		killed := time.Since(t0)
		var out string
		var rerr error
		// 90 s is no timing bound: a loaded host's gVisor takes tens of seconds to reap the
		// bomb's tasks; the sandbox must answer again.
		for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			// As root: what a fork let outlive the group's kill (under gVisor) goes too.
			rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
			res, err := sb.Commands.Run(rctx, "while pkill -KILL -u user; do :; done; echo alive", cove.User("root"))
			rcancel()
			if rerr = err; err == nil && strings.Contains(res.Stdout, "alive") {
				out = res.Stdout
				break
			}
			if time.Now().After(deadline) || err != nil && strings.Contains(err.Error(), "was killed") {
				break
			}
		}
		st, body := call(env.keyA, http.MethodGet, "/sandboxes/"+sb.ID, nil, nil)
		t.Logf("the bomb's kill took %s", killed.Round(time.Millisecond))
		// Under runc the pids cgroup is envd's too: envd, unable to start a thread, may exit
		// and end the sandbox (envd_exited), bounded all the same. Under gVisor the user's
		// budget is its own (RLIMIT_NPROC): the sandbox must answer again.
		starved := env.engine == "runc" && st == http.StatusNotFound && strings.Contains(body, "envd_exited")
		probe(t, classBounds, "a fork bomb of the user", kerr == nil && out != "" && st == http.StatusOK || starved,
			fmt.Sprintf("kill: %v after %s; a command after it: %v; GET answered %d %.200s", kerr, killed.Round(time.Millisecond), rerr, st, body))
	})
	t.Run("a fork-bombed sandbox is killed and gone", func(t *testing.T) {
		sb := sandbox(t, env.keyA, cove.SandboxOptions{Timeout: 5 * time.Minute})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := sb.Commands.Start(ctx, "bomb() { bomb | bomb & }; bomb", cove.User("root")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Second) // the bomb fills the sandbox's pids
		begun := time.Now()
		code, body := call(env.keyA, http.MethodDelete, "/sandboxes/"+sb.ID, nil, nil)
		took := time.Since(begun)
		after, _ := call(env.keyA, http.MethodGet, "/sandboxes/"+sb.ID, nil, nil)
		left, _ := filepath.Glob("/sys/fs/cgroup/*/cove/" + sb.ID)
		if more, _ := filepath.Glob("/sys/fs/cgroup/cove/" + sb.ID); len(more) > 0 {
			left = append(left, more...)
		}
		t.Logf("killing the fork-bombed sandbox took %s", took.Round(time.Millisecond))
		// A bomb that took its own sandbox down first (envd could not start a thread at the
		// pids limit; on gVisor the sentry ends the sandbox there) is bounded too: gone, and
		// nothing left of it.
		ended := code == http.StatusNotFound && strings.Contains(string(body), "was killed: envd_exited")
		probe(t, classBounds, "a fork bomb", (code >= 200 && code < 300 || ended) && after == http.StatusNotFound && len(left) == 0 && took < 30*time.Second,
			fmt.Sprintf("kill answered %d %.120s after %s; then GET answered %d; cgroups left: %v", code, body, took.Round(time.Millisecond), after, left))
	})
}
