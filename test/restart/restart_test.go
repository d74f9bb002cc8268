// Package restart proves that stopping or crashing `cove server` kills no one: the next start
// adopts every sandbox with its processes, memory, timers and output; a sandbox that died
// meanwhile is killed with a reason a client can read; and no mount, cgroup, network
// namespace or process is left behind.
package restart

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/cove-dev/cove/internal/covetest"
	"github.com/cove-dev/cove/internal/sandbox/network/nettest"
	pb "github.com/cove-dev/cove/sdk/gen/process"
	"github.com/cove-dev/cove/sdk/gen/process/processconnect"
)

func call(t *testing.T, s *covetest.Server, method, path string, body any) (int, map[string]any) {
	t.Helper()
	code, raw := callJSON(t, s, method, path, body)
	var out map[string]any
	_ = json.Unmarshal([]byte(raw), &out)
	return code, out
}

func create(t *testing.T, s *covetest.Server) string {
	t.Helper()
	return createWith(t, s, nil)
}

// createWith creates a sandbox with network (E2B's network object) when it is not nil.
func createWith(t *testing.T, s *covetest.Server, network map[string]any) string {
	t.Helper()
	req := map[string]any{"templateID": "base", "timeout": 120}
	if network != nil {
		req["network"] = network
	}
	code, body := call(t, s, http.MethodPost, "/sandboxes", req)
	if code != http.StatusCreated {
		t.Fatalf("create: %d %v", code, body)
	}
	return body["sandboxID"].(string)
}

// curlExit fetches url from inside sandbox id and returns curl's exit code.
func curlExit(t *testing.T, s *covetest.Server, id, url string) int {
	t.Helper()
	out := strings.TrimSpace(exec(t, s, id, "curl -sS -o /dev/null --max-time 5 "+url+" 2>/dev/null; echo $?"))
	code, err := strconv.Atoi(out)
	if err != nil {
		t.Fatalf("curl in %s said %q", id, out)
	}
	return code
}

// leftovers lists what of sandbox id remains on the host.
func leftovers(t *testing.T, id string) []string {
	t.Helper()
	var out []string
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil && bytes.Contains(b, []byte(id)) {
		out = append(out, "a mount")
	}
	if m, _ := filepath.Glob("/sys/fs/cgroup/*/cove/" + id); len(m) > 0 {
		out = append(out, fmt.Sprintf("cgroups %v", m))
	}
	if _, err := os.Stat("/run/cove/netns/" + id); err == nil {
		out = append(out, "its netns file")
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cgroup")
	for _, p := range procs {
		if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, []byte("/cove/"+id)) {
			out = append(out, "process "+strings.Split(p, "/")[2])
		}
	}
	return out
}

// onDisk says whether sandbox id is paused as a snapshot on disk: CRIU's images (runc) or
// runsc's (COVE_RUNTIME=runsc).
func onDisk(s *covetest.Server, id string) bool {
	for _, img := range []string{"inventory.img", "checkpoint.img"} {
		if _, err := os.Stat(filepath.Join(s.DataDir, "sandboxes", id, "checkpoint", img)); err == nil {
			return true
		}
	}
	return false
}

func alive(t *testing.T, id string) bool {
	t.Helper()
	m, _ := filepath.Glob("/sys/fs/cgroup/memory/cove/" + id)
	return len(m) > 0
}

func waitGone(t *testing.T, id string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		left := leftovers(t, id)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s left behind: %s", id, strings.Join(left, ", "))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// start starts script in the sandbox with bash, through the server's proxy.
func start(t *testing.T, ctx context.Context, s *covetest.Server, id, script string) *connect.ServerStreamForClient[pb.StartResponse] {
	t.Helper()
	c := processconnect.NewProcessClient(http.DefaultClient, s.URL)
	req := connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-c", script}}})
	req.Header().Set("E2b-Sandbox-Id", id)
	req.Header().Set("X-API-Key", s.Key)
	stream, err := c.Start(ctx, req)
	if err != nil {
		t.Fatalf("start %q in %s: %v", script, id, err)
	}
	return stream
}

// exec runs script in the sandbox with bash and returns its stdout once it ends.
func exec(t *testing.T, s *covetest.Server, id, script string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stream := start(t, ctx, s, id, script)
	var out strings.Builder
	for stream.Receive() {
		if d := stream.Msg().GetEvent().GetData(); d != nil {
			out.Write(d.GetStdout())
		}
		if end := stream.Msg().GetEvent().GetEnd(); end != nil && end.GetExitCode() != 0 {
			t.Fatalf("%q in %s exited %d: %s", script, id, end.GetExitCode(), end.GetError())
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("%q in %s: %v", script, id, err)
	}
	return out.String()
}

// background starts script in the sandbox, leaves it running and returns its pid.
func background(t *testing.T, s *covetest.Server, id, script string) uint32 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel() // the process outlives its stream
	stream := start(t, ctx, s, id, script)
	for stream.Receive() {
		if st := stream.Msg().GetEvent().GetStart(); st != nil {
			return st.GetPid()
		}
	}
	t.Fatalf("no start event from %s: %v", id, stream.Err())
	return 0
}

// waitFor polls cond until it holds, or fails the test after d naming what.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, d)
		}
	}
}

// merged is the sandbox's root as the host sees it.
func merged(s *covetest.Server, id string) string {
	return filepath.Join(s.DataDir, "sandboxes", id, "rootfs")
}

// holder keeps a random value only in its memory and writes it to /tmp/answer on SIGUSR1;
// /tmp/v is the value to compare with.
const holder = `v=$(head -c8 /dev/urandom | od -An -tx1 | tr -d ' \n'); echo $v > /tmp/v; trap 'echo $v > /tmp/answer' USR1; while :; do sleep 0.1; done`

func TestRestart(t *testing.T) {
	covetest.Skip(t)
	t.Run("sandboxes carry on with the same processes and memory after", func(t *testing.T) {
		for _, tt := range []struct {
			name string
			stop func(*covetest.Server)
		}{
			{"a crash (SIGKILL)", (*covetest.Server).Crash},
			{"a stop (SIGTERM)", (*covetest.Server).Stop},
		} {
			t.Run(tt.name, func(t *testing.T) {
				// With egress under a rule: the running and the paused-to-disk sandbox reach the
				// fake internet's host but not its other address, before and after.
				in := nettest.New(t)
				s := covetest.StartWith(t, "", covetest.Options{OnStop: "keep"})
				ruled := map[string]any{"denyOut": []string{in.Other.String()}}
				running, paused, frozen := createWith(t, s, ruled), createWith(t, s, ruled), create(t, s)
				egress := func(t *testing.T, id, when string) {
					t.Helper()
					if code := curlExit(t, s, id, in.URL("http", "/")); code != 0 {
						t.Errorf("%s: %s cannot reach the test host: curl exited %d", when, id, code)
					}
					if code := curlExit(t, s, id, "http://"+in.Other.String()+"/"); code == 0 {
						t.Errorf("%s: %s reached %s, which its denyOut names", when, id, in.Other)
					}
				}
				egress(t, running, "before the restart")
				egress(t, paused, "before the restart")
				frozenPid := background(t, s, frozen, holder)
				pid := background(t, s, running, holder)
				waitFor(t, 20*time.Second, "the holder wrote its value", func() bool {
					_, err := os.Stat(filepath.Join(merged(s, running), "tmp/v"))
					return err == nil
				})
				marker := fmt.Sprintf("written-while-down-%d", time.Now().UnixNano())
				background(t, s, running, `while [ ! -e /tmp/go ]; do sleep 0.05; done; echo `+marker+`; touch /tmp/done; sleep 600`)
				if code, body := call(t, s, http.MethodPost, "/sandboxes/"+paused+"/pause", nil); code != http.StatusNoContent {
					t.Fatalf("pause: %d %v", code, body)
				}
				waitFor(t, 20*time.Second, "the frozen sandbox's holder wrote its value", func() bool {
					_, err := os.Stat(filepath.Join(merged(s, frozen), "tmp/v"))
					return err == nil
				})
				if code, body := call(t, s, http.MethodPost, "/sandboxes/"+frozen+"/pause", map[string]any{"kind": "freeze"}); code != http.StatusNoContent {
					t.Fatalf("pause (freeze): %d %v", code, body)
				}
				tt.stop(s)
				if !alive(t, running) {
					t.Fatalf("sandbox %s died with the server", running)
				}
				if !onDisk(s, paused) || !alive(t, frozen) {
					t.Fatalf("after the server went down: the paused sandbox on disk %v, the frozen one alive %v", onDisk(s, paused), alive(t, frozen))
				}
				// Output written while no server runs waits for the next one.
				if err := os.WriteFile(filepath.Join(merged(s, running), "tmp/go"), nil, 0o644); err != nil {
					t.Fatal(err)
				}
				waitFor(t, 20*time.Second, "the sandbox wrote while the server was down", func() bool {
					_, err := os.Stat(filepath.Join(merged(s, running), "tmp/done"))
					return err == nil
				})
				s.Restart()

				if code, body := call(t, s, http.MethodGet, "/sandboxes/"+running, nil); code != http.StatusOK || body["state"] != "running" {
					t.Fatalf("GET the running sandbox after the restart: %d %v", code, body)
				}
				got := exec(t, s, running, fmt.Sprintf(`kill -USR1 %d && for i in $(seq 100); do [ -s /tmp/answer ] && break; sleep 0.1; done; cat /tmp/answer /tmp/v`, pid))
				if lines := strings.Fields(got); len(lines) != 2 || lines[0] != lines[1] {
					t.Fatalf("the process %d holding a value in memory answered %q, want its value twice", pid, got)
				}
				egress(t, running, "after the restart")
				if _, info := call(t, s, http.MethodGet, "/sandboxes/"+running, nil); !strings.Contains(fmt.Sprint(info["network"]), in.Other.String()) {
					t.Errorf("getInfo after the restart does not echo the sandbox's denyOut: %v", info["network"])
				}
				waitFor(t, 30*time.Second, "the line written while the server was down in the sandbox's logs", func() bool {
					code, body := callRaw(t, s, "/v2/sandboxes/"+running+"/logs?search="+marker)
					return code == http.StatusOK && strings.Contains(body, marker)
				})

				if code, body := call(t, s, http.MethodGet, "/sandboxes/"+paused, nil); code != http.StatusOK || body["state"] != "paused" {
					t.Fatalf("GET the paused sandbox after the restart: %d %v, want it still paused", code, body)
				}
				if code, body := call(t, s, http.MethodPost, "/sandboxes/"+paused+"/connect", map[string]any{"timeout": 60}); code != http.StatusCreated {
					t.Fatalf("connect to the paused sandbox after the restart: %d %v, want 201 (resumed)", code, body)
				}
				if out := exec(t, s, paused, "echo resumed"); strings.TrimSpace(out) != "resumed" {
					t.Fatalf("a command in the resumed sandbox said %q", out)
				}
				egress(t, paused, "after the restart and the restore")
				// The frozen one stayed frozen, and thaws with its process and memory.
				if code, body := call(t, s, http.MethodGet, "/sandboxes/"+frozen, nil); code != http.StatusOK || body["state"] != "paused" {
					t.Fatalf("GET the frozen sandbox after the restart: %d %v, want it still paused", code, body)
				}
				if code, body := call(t, s, http.MethodPost, "/sandboxes/"+frozen+"/resume", map[string]any{"timeout": 60}); code != http.StatusCreated {
					t.Fatalf("resume the frozen sandbox after the restart: %d %v", code, body)
				}
				if got, want := strings.TrimSpace(exec(t, s, frozen, fmt.Sprintf(`kill -USR1 %d && for i in $(seq 100); do [ -s /tmp/answer ] && break; sleep 0.1; done; cat /tmp/answer`, frozenPid))), strings.TrimSpace(exec(t, s, frozen, "cat /tmp/v")); got != want {
					t.Fatalf("the frozen sandbox's holder answered %q, want %q", got, want)
				}
				for _, id := range []string{running, paused, frozen} {
					if code, _ := call(t, s, http.MethodDelete, "/sandboxes/"+id, nil); code != http.StatusNoContent {
						t.Errorf("kill %s after the restart: %d", id, code)
					}
					waitGone(t, id)
				}
			})
		}
	})

	t.Run("a server stopped with --on-stop kill kills its sandboxes with server_shutdown", func(t *testing.T) {
		s := covetest.Start(t, "")
		running, paused := create(t, s), create(t, s)
		if code, body := call(t, s, http.MethodPost, "/sandboxes/"+paused+"/pause", nil); code != http.StatusNoContent {
			t.Fatalf("pause: %d %v", code, body)
		}
		s.Stop()
		for _, id := range []string{running, paused} {
			if alive(t, id) {
				t.Fatalf("sandbox %s alive after the server stopped", id)
			}
		}
		s.Restart()
		for _, id := range []string{running, paused} {
			code, body := call(t, s, http.MethodGet, "/sandboxes/"+id, nil)
			msg, _ := body["message"].(string)
			if code != http.StatusNotFound || !strings.Contains(msg, "was killed: server_shutdown") {
				t.Errorf("GET %s after restart: %d %q, want 404 saying it was killed: server_shutdown", id, code, msg)
			}
			waitGone(t, id)
		}
		// The server still works after the restart.
		id := create(t, s)
		if code, _ := call(t, s, http.MethodDelete, "/sandboxes/"+id, nil); code != http.StatusNoContent {
			t.Errorf("kill after restart: %d", code)
		}
		waitGone(t, id)
	})

	t.Run("a sandbox whose timeout ran out while the server was down is killed with reason timeout at start", func(t *testing.T) {
		s := covetest.Start(t, "")
		code, body := call(t, s, http.MethodPost, "/sandboxes", map[string]any{"templateID": "base", "timeout": 2})
		if code != http.StatusCreated {
			t.Fatalf("create: %d %v", code, body)
		}
		id := body["sandboxID"].(string)
		_, info := call(t, s, http.MethodGet, "/sandboxes/"+id, nil)
		endAt, err := time.Parse(time.RFC3339Nano, info["endAt"].(string))
		if err != nil {
			t.Fatalf("endAt %v: %v", info["endAt"], err)
		}
		s.Crash()
		waitFor(t, 30*time.Second, "the sandbox's timeout passed", func() bool { return time.Now().After(endAt.Add(200 * time.Millisecond)) })
		if !alive(t, id) {
			t.Fatalf("sandbox %s died with the server", id)
		}
		s.Restart()
		waitFor(t, 20*time.Second, "the sandbox killed with reason timeout", func() bool {
			code, body := call(t, s, http.MethodGet, "/sandboxes/"+id, nil)
			msg, _ := body["message"].(string)
			return code == http.StatusNotFound && strings.Contains(msg, "was killed: timeout")
		})
		waitGone(t, id)
	})

	t.Run("a sandbox whose processes died while the server was down is killed as orphaned with a post-mortem saying so", func(t *testing.T) {
		s := covetest.Start(t, "")
		id := create(t, s)
		s.Crash()
		for _, p := range leftovers(t, id) {
			if pid, ok := strings.CutPrefix(p, "process "); ok {
				_ = killPid(pid)
			}
		}
		waitFor(t, 20*time.Second, "the sandbox's processes gone", func() bool {
			for _, p := range leftovers(t, id) {
				if strings.HasPrefix(p, "process ") {
					return false
				}
			}
			return true
		})
		s.Restart()
		code, body := call(t, s, http.MethodGet, "/sandboxes/"+id, nil)
		msg, _ := body["message"].(string)
		if code != http.StatusNotFound || !strings.Contains(msg, "was killed: orphaned") {
			t.Fatalf("GET after restart: %d %q, want 404 saying it was killed: orphaned", code, msg)
		}
		_, evs := callRaw(t, s, "/events/sandboxes/"+id+"?type=sandbox.lifecycle.killed")
		if !strings.Contains(evs, "died while the server was down") {
			t.Errorf("the killed event's post-mortem does not say the processes died while the server was down: %s", evs)
		}
		waitGone(t, id)
	})
}

// callRaw GETs path with the server's key and returns the status and body.
func callRaw(t *testing.T, s *covetest.Server, path string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, s.URL+path, nil)
	req.Header.Set("X-API-Key", s.Key)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

func killPid(pid string) error {
	n, err := strconv.Atoi(pid)
	if err != nil {
		return err
	}
	return syscall.Kill(n, syscall.SIGKILL)
}

// commands lists a sandbox's command records through the API.
func commands(t *testing.T, s *covetest.Server, id string) []map[string]any {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, s.URL+"/sandboxes/"+id+"/commands", nil)
	req.Header.Set("X-API-Key", s.Key)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out struct {
		Commands []map[string]any `json:"commands"`
	}
	_ = json.NewDecoder(res.Body).Decode(&out)
	return out.Commands
}

// A command running through a crash runs on; its record stays open until it ends, and when
// the adopted sandbox is killed, the record ends with the kill.
func TestACommandRunningThroughACrashIsClosedWhenItsSandboxIsKilled(t *testing.T) {
	s := covetest.Start(t, "")
	id := create(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { // the stream breaks when the server dies under it: that is the point
		c := processconnect.NewProcessClient(http.DefaultClient, s.URL)
		req := connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/sleep", Args: []string{"300"}}})
		req.Header().Set("E2b-Sandbox-Id", id)
		req.Header().Set("X-API-Key", s.Key)
		req.Header().Set("X-E2B-Request-Id", "req-crash-sleep")
		if stream, err := c.Start(ctx, req); err == nil {
			for stream.Receive() {
			}
		}
	}()
	open := func() bool {
		for _, c := range commands(t, s, id) {
			if c["requestId"] == "req-crash-sleep" && (c["endCause"] == nil || c["endCause"] == "") {
				return true
			}
		}
		return false
	}
	for deadline := time.Now().Add(20 * time.Second); !open(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no open record of the sleep after 20 s: %v", commands(t, s, id))
		}
	}
	s.Crash()
	s.Restart()
	if !open() {
		t.Fatalf("the sleep's record was closed by the restart, but the sleep runs on: %v", commands(t, s, id))
	}
	if code, _ := call(t, s, http.MethodDelete, "/sandboxes/"+id, nil); code != http.StatusNoContent {
		t.Fatalf("kill after the restart: %d", code)
	}
	waitGone(t, id)
	waitFor(t, 20*time.Second, "the sleep's record closed", func() bool { return !open() })
	var rec map[string]any
	for _, c := range commands(t, s, id) {
		if c["requestId"] == "req-crash-sleep" {
			rec = c
		}
	}
	if rec == nil {
		t.Fatalf("the sleep's record is gone after the restart")
	}
	if rec["endCause"] != "sandbox_killed" || rec["killReason"] != "request" || rec["endedAt"] == nil {
		t.Errorf("record after the kill: %v, want it ended as sandbox_killed with kill reason request", rec)
	}
}
