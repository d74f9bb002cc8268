package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/cove-dev/cove/internal/covetest"
	"github.com/cove-dev/cove/internal/sandbox/runtime"
	"github.com/cove-dev/cove/sdk/gen/process"
	"github.com/cove-dev/cove/sdk/gen/process/processconnect"
)

func randomHex(t testing.TB, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// TestSandboxIsolation checks, through the REST API and the proxy, what a sandbox can see
// of the host and what it may use, on each runtime: the package's server on runc, and a
// server of its own whose sandboxes run on gVisor (runsc).
func TestSandboxIsolation(t *testing.T) {
	need(t)
	covetest.EachRuntime(t, func(t *testing.T, engine runtime.Engine) {
		if engine == runtime.EngineRunsc {
			s := covetest.StartWith(t, "", covetest.Options{OnStop: "kill", Args: []string{"--runtime", "runsc"}})
			// The package's helpers talk to server: this subtest's (the package runs no test
			// in parallel).
			saved := server
			server.URL, server.APIKey, server.DataDir, server.LogPath = s.URL, s.Key, s.DataDir, ""
			t.Cleanup(func() { server = saved })
		}
		sandboxIsolation(t, engine)
	})
}

func sandboxIsolation(t *testing.T, engine runtime.Engine) {
	sb := create(t, nil)
	e := envdOf(sb)

	t.Run("the host's processes are invisible: ps lists only the sandbox's", func(t *testing.T) {
		out := e.mustRun(t, "ps -e -o pid=,comm=")
		procs := strings.Split(strings.TrimSpace(out), "\n")
		for _, p := range procs {
			f := strings.Fields(p)
			if len(f) == 2 && (f[1] == "e2e.test" || f[1] == "runc" || f[1] == "node") {
				t.Errorf("sandbox sees the host's process %q; ps -e:\n%s", p, out)
			}
		}
		// envd, the command's bash and ps, and little else.
		if len(procs) > 8 {
			t.Errorf("sandbox sees %d processes, want only its own few; ps -e:\n%s", len(procs), out)
		}
	})

	t.Run("PID 1 in the sandbox is envd, not the host's init", func(t *testing.T) {
		comm := strings.TrimSpace(e.mustRun(t, "cat /proc/1/comm"))
		if comm != "cove" && comm != "envd" {
			t.Errorf("/proc/1/comm is %q, want cove or envd", comm)
		}
	})

	t.Run("files the host makes in /tmp and /root are absent in the sandbox", func(t *testing.T) {
		name := "cove-e2e-marker-" + randomHex(t, 6)
		for _, dir := range []string{"/tmp", "/root"} {
			p := filepath.Join(dir, name)
			if err := os.WriteFile(p, []byte("host only"), 0o600); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.Remove(p) })
		}
		out := e.mustRun(t, "for d in /tmp /root; do if [ -e $d/"+name+" ]; then echo visible:$d; fi; done; echo checked")
		if strings.TrimSpace(out) != "checked" {
			t.Errorf("host marker files are visible in the sandbox: %q", out)
		}
	})

	t.Run("the request id sent as X-E2B-Request-Id comes back and is in the sandbox's envd log", func(t *testing.T) {
		id := "e2e-" + randomHex(t, 8)
		req := connect.NewRequest(&process.ListRequest{})
		req.Header().Set("X-E2B-Request-Id", id)
		resp, err := e.proc.List(context.Background(), req)
		if err != nil {
			t.Fatalf("process.List: %v", err)
		}
		if got := resp.Header().Get("X-E2B-Request-Id"); got != id {
			t.Errorf("response X-E2B-Request-Id is %q, want %q", got, id)
		}
		logPath := filepath.Join(server.DataDir, "logs", sb.ID+".log")
		deadline := time.Now().Add(5 * time.Second)
		for {
			lines, err := logLinesWith(logPath, id)
			if err != nil {
				t.Fatalf("read envd log: %v", err)
			}
			if len(lines) > 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("no JSON line with request_id %q in %s", id, logPath)
			}
			time.Sleep(100 * time.Millisecond)
		}
	})

	// On both engines the process dies and the sandbox lives on: under runc the kernel's OOM
	// killer chooses it, under gVisor envd does (the sentry enforces no limit inside; the
	// host cgroup has headroom above it so that the host's OOM killer stays behind envd).
	t.Run("a process allocating past the memory limit is SIGKILLed and the sandbox lives on", func(t *testing.T) {
		if mb := sb.info(t).MemoryMB; mb <= 0 || mb >= 1024 {
			t.Fatalf("sandbox memoryMB is %d, want a limit under the 1 GiB the test allocates", mb)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		stdin := false
		stream, err := e.proc.Start(ctx, connect.NewRequest(&process.StartRequest{
			Process: &process.ProcessConfig{Cmd: "python3", Args: []string{"-c", `b = b"x" * (1 << 30); print(len(b))`}},
			Stdin:   &stdin,
		}))
		if err != nil {
			t.Fatalf("start python3: %v", err)
		}
		res, err := collect(stream, nil)
		if err != nil {
			time.Sleep(time.Second)
			code, info := call(t, http.MethodGet, "/sandboxes/"+sb.ID, nil)
			t.Fatalf("python3 allocating 1 GiB: %v (%s); the sandbox: %d %s", err, res, code, info)
		}
		if res.end.GetExited() || res.end.GetStatus() != "signal: killed" || !strings.HasPrefix(res.end.GetError(), "oom_killed: ") {
			t.Errorf("python3 allocating 1 GiB ended with %s, want status \"signal: killed\" and an error saying oom_killed", res)
		}
		var rec struct {
			EndCause string `json:"endCause"`
		}
		deadline := time.Now().Add(30 * time.Second)
		for rec.EndCause == "" && time.Now().Before(deadline) {
			if code, b := call(t, http.MethodGet, fmt.Sprintf("/sandboxes/%s/commands/%d", sb.ID, res.pid), nil); code == http.StatusOK {
				_ = json.Unmarshal(b, &rec)
			}
			if rec.EndCause == "" {
				time.Sleep(100 * time.Millisecond) // the record reaches the store through envd's pipe
			}
		}
		if rec.EndCause != "oom_killed" {
			t.Errorf("the command record's end cause is %q, want oom_killed", rec.EndCause)
		}
		// The kill is the sandbox's oom event on both engines: from the kernel's count under
		// runc, from envd's record under gVisor.
		var oom []json.RawMessage
		for deadline := time.Now().Add(30 * time.Second); len(oom) == 0 && time.Now().Before(deadline); {
			code, b := call(t, http.MethodGet, "/events/sandboxes/"+sb.ID, nil)
			var evs []struct {
				Type string          `json:"type"`
				Data json.RawMessage `json:"eventData"`
			}
			if code == http.StatusOK && json.Unmarshal(b, &evs) == nil {
				for _, ev := range evs {
					if ev.Type == "sandbox.lifecycle.oom" {
						oom = append(oom, ev.Data)
					}
				}
			}
			if len(oom) == 0 {
				time.Sleep(200 * time.Millisecond)
			}
		}
		if len(oom) == 0 {
			t.Error("no sandbox.lifecycle.oom event for the kill")
		} else {
			t.Logf("oom event: %s", oom[0])
		}
		if got := e.health(t); got != http.StatusNoContent {
			t.Errorf("GET /health after the OOM kill: %d, want 204", got)
		}
		if out := e.mustRun(t, "echo alive"); out != "alive\n" {
			t.Errorf("a command after the OOM kill printed %q", out)
		}
		if st := sb.info(t).State; st != "running" {
			t.Errorf("sandbox state after the OOM kill is %q, want running", st)
		}
	})

	// runc's pids cgroup, gVisor's RLIMIT_NPROC (per user; the host's pids.max behind it)
	// stop the bomb with EAGAIN; killing its command's process group ends it. Under gVisor the
	// user's bomb leaves root's (envd's) budget whole, and the sandbox must live on. Under
	// runc the pids cgroup is envd's too: when envd cannot start a thread at the limit it
	// exits, and the sandbox ends killed with envd_exited, bounded all the same.
	t.Run("a fork bomb of the user stops at the pids limit and the sandbox lives on", func(t *testing.T) {
		sb := create(t, nil)
		e := envdOf(sb)
		envdExited := func() bool {
			for deadline := time.Now().Add(5 * time.Second); engine == runtime.EngineRunc && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
				if code, body := call(t, http.MethodGet, "/sandboxes/"+sb.ID, nil); code == http.StatusNotFound && strings.Contains(string(body), "envd_exited") {
					t.Logf("under runc the bomb starved envd, and the sandbox ended: %s", body)
					return true
				}
			}
			return false
		}
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		as := processconnect.NewProcessClient(&http.Client{Transport: &envdTransport{sb: sb, token: sb.AccessToken, user: "user"}}, server.URL)
		stdin := false
		stream, err := as.Start(ctx, connect.NewRequest(&process.StartRequest{
			Process: &process.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-c", "bomb() { bomb | bomb & }; bomb; exec sleep 60"}},
			Stdin:   &stdin,
		}))
		if err != nil {
			t.Fatalf("start the bomb: %v", err)
		}
		pids := make(chan uint32, 1)
		ended := make(chan result, 1)
		go func() {
			res, _ := collect(stream, func(pid uint32) { pids <- pid })
			ended <- res
		}()
		pid := <-pids
		time.Sleep(3 * time.Second) // the bomb fills the sandbox's pids
		if _, err := e.proc.SendSignal(ctx, connect.NewRequest(&process.SendSignalRequest{
			Process: &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: pid}},
			Signal:  process.Signal_SIGNAL_SIGKILL,
		})); err != nil {
			if envdExited() {
				return
			}
			t.Fatalf("kill the bomb: %v", err)
		}
		select {
		case res := <-ended:
			res.stderr = res.stderr[:min(len(res.stderr), 200)]
			t.Logf("the bomb's command ended: %s", res)
		case <-ctx.Done():
			t.Fatal("the bomb's command did not end after its kill")
		}
		// A child forked while the group's kill went out may outlive it (under gVisor): root,
		// whose own processes the user's bomb did not count against, ends the rest.
		// Not a timing bound: on a loaded 2-core host gVisor takes tens of seconds to reap a
		// bomb's thousand tasks (30 s was seen to pass and to fail); the sandbox must answer again.
		for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
			res, err := e.run(rctx, "while pkill -KILL -u user; do :; done; echo alive")
			rcancel()
			if err == nil && res.stdout == "alive\n" {
				break
			}
			if time.Now().After(deadline) {
				if envdExited() {
					return
				}
				t.Fatalf("90 s after the bomb's kill a command gets %v (%s)", err, res)
			}
		}
		if got := e.health(t); got != http.StatusNoContent {
			t.Errorf("GET /health after the bomb: %d, want 204", got)
		}
		if st := sb.info(t).State; st != "running" {
			t.Errorf("sandbox state after the bomb is %q, want running", st)
		}
	})
}

// logLinesWith returns the JSON log lines of path whose request_id is id.
func logLinesWith(path, id string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var line struct {
			RequestID string `json:"request_id"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.RequestID == id {
			out = append(out, sc.Text())
		}
	}
	return out, sc.Err()
}

// TestSecureSandbox checks that a secure sandbox's envd refuses calls through the proxy
// without its access token, and answers them with it.
func TestSecureSandbox(t *testing.T) {
	need(t)

	sb := create(t, map[string]any{"secure": true})
	if sb.AccessToken == "" {
		t.Fatal("create of a secure sandbox returned no envdAccessToken")
	}
	for _, tc := range []struct {
		name  string
		token string
		want  connect.Code // 0: success
	}{
		{"process.List without X-Access-Token is unauthenticated", "", connect.CodeUnauthenticated},
		{"process.List with a wrong X-Access-Token is unauthenticated", "wrong-" + sb.AccessToken, connect.CodeUnauthenticated},
		{"process.List with the sandbox's X-Access-Token succeeds", sb.AccessToken, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := envdWith(sb, tc.token).proc.List(context.Background(), connect.NewRequest(&process.ListRequest{}))
			if got := connect.CodeOf(err); tc.want == 0 && err != nil || tc.want != 0 && got != tc.want {
				t.Errorf("process.List: %v (code %v), want code %v", err, got, tc.want)
			}
		})
	}
}
