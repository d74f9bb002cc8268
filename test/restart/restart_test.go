// Package restart proves that stopping or crashing `cove server` loses no sandbox silently
// and leaks nothing: sandboxes it held are killed with a reason a client can read, and no
// mount, cgroup, network namespace or process is left behind.
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
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/cove-dev/cove/gen/process"
	"github.com/cove-dev/cove/gen/process/processconnect"
	"github.com/cove-dev/cove/internal/covetest"
)

func call(t *testing.T, s *covetest.Server, method, path string, body any) (int, map[string]any) {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, s.URL+path, r)
	req.Header.Set("X-API-Key", s.Key)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	var out map[string]any
	b, _ := io.ReadAll(res.Body)
	_ = json.Unmarshal(b, &out)
	return res.StatusCode, out
}

func create(t *testing.T, s *covetest.Server) string {
	t.Helper()
	code, body := call(t, s, http.MethodPost, "/sandboxes", map[string]any{"templateID": "base", "timeout": 120})
	if code != http.StatusCreated {
		t.Fatalf("create: %d %v", code, body)
	}
	return body["sandboxID"].(string)
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

func TestRestart(t *testing.T) {
	covetest.Skip(t)
	tests := []struct {
		name   string
		stop   func(*covetest.Server)
		reason string
		// whether the sandboxes outlive the server process until it comes back
		survive bool
	}{
		{"a crashed server's sandboxes are killed as orphaned when it comes back", (*covetest.Server).Crash, "orphaned", true},
		{"a stopped server kills its sandboxes with server_shutdown", (*covetest.Server).Stop, "server_shutdown", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := covetest.Start(t, "")
			running, paused := create(t, s), create(t, s)
			if code, body := call(t, s, http.MethodPost, "/sandboxes/"+paused+"/pause", nil); code != http.StatusNoContent {
				t.Fatalf("pause: %d %v", code, body)
			}
			tt.stop(s)
			for _, id := range []string{running, paused} {
				if got := alive(t, id); got != tt.survive {
					t.Fatalf("sandbox %s alive after the server went down: %v, want %v", id, got, tt.survive)
				}
			}
			s.Restart()
			for _, id := range []string{running, paused} {
				code, body := call(t, s, http.MethodGet, "/sandboxes/"+id, nil)
				msg, _ := body["message"].(string)
				if code != http.StatusNotFound || !strings.Contains(msg, "was killed: "+tt.reason) {
					t.Errorf("GET %s after restart: %d %q, want 404 saying it was killed: %s", id, code, msg, tt.reason)
				}
				waitGone(t, id)
				if !strings.Contains(s.Logs(), `"kill_reason":"`+tt.reason+`"`) {
					t.Errorf("no kill line with reason %s in the server log", tt.reason)
				}
			}
			// The server still works after the restart.
			id := create(t, s)
			if code, _ := call(t, s, http.MethodDelete, "/sandboxes/"+id, nil); code != http.StatusNoContent {
				t.Errorf("kill after restart: %d", code)
			}
			waitGone(t, id)
		})
	}
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

func TestACrashLeavesNoCommandRecordOpen(t *testing.T) {
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
	waitGone(t, id)
	var rec map[string]any
	for _, c := range commands(t, s, id) {
		if c["requestId"] == "req-crash-sleep" {
			rec = c
		}
	}
	if rec == nil {
		t.Fatalf("the sleep's record is gone after the restart")
	}
	if rec["endCause"] != "sandbox_killed" || rec["killReason"] != "orphaned" || rec["endedAt"] == nil {
		t.Errorf("record after the crash: %v, want it ended as sandbox_killed with kill reason orphaned", rec)
	}
}
