package restart

import (
	"fmt"
	"net/http"
	"os"
	osexec "os/exec"

	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/covetest"
)

// skipWithoutCRIU skips a test of snapshot pause where CRIU 4 is not installed.
func skipWithoutCRIU(t *testing.T) {
	t.Helper()
	out, err := osexec.Command("criu", "--version").Output()
	if err != nil || !strings.Contains(string(out), "Version: 4") && !strings.Contains(string(out), "Version: 5") {
		t.Skipf("snapshot pause needs CRIU 4 (scripts/criu.sh builds it): criu --version: %q %v", out, err)
	}
}

func TestSnapshotPause(t *testing.T) {
	covetest.Skip(t)
	skipWithoutCRIU(t)
	t.Run("a paused sandbox is on disk and frees its memory; it survives a crash and resumes with its processes and memory and /dev/shm", func(t *testing.T) {
		s := covetest.Start(t, "")
		id := create(t, s)
		pid := background(t, s, id, holder)
		waitFor(t, 20*time.Second, "the holder wrote its value", func() bool {
			_, err := os.Stat(filepath.Join(merged(s, id), "tmp/v"))
			return err == nil
		})
		exec(t, s, id, `head -c 32M /dev/urandom > /dev/shm/blob && sha256sum /dev/shm/blob > /tmp/shmsum`)
		if code, body := call(t, s, http.MethodPost, "/sandboxes/"+id+"/pause", map[string]any{}); code != http.StatusNoContent {
			t.Fatalf("pause: %d %v", code, body)
		}
		if alive(t, id) || !onDisk(s, id) {
			t.Errorf("the paused sandbox is not on disk with its memory freed (memory cgroup: %v, on disk: %v)", alive(t, id), onDisk(s, id))
		}
		_, evs := callRaw(t, s, "/events/sandboxes/"+id+"?type=sandbox.lifecycle.paused")
		if !strings.Contains(evs, `"kind":"snapshot"`) || !strings.Contains(evs, `"snapshot_bytes"`) {
			t.Errorf("the paused event does not say it was a snapshot and its size: %s", evs)
		}
		s.Crash()
		s.Restart()
		if code, body := call(t, s, http.MethodGet, "/sandboxes/"+id, nil); code != http.StatusOK || body["state"] != "paused" {
			t.Fatalf("GET after the restart: %d %v, want it paused", code, body)
		}
		if code, body := call(t, s, http.MethodPost, "/sandboxes/"+id+"/connect", map[string]any{"timeout": 60}); code != http.StatusCreated {
			t.Fatalf("connect: %d %v, want 201 (resumed)", code, body)
		}
		got := exec(t, s, id, fmt.Sprintf(`kill -USR1 %d && for i in $(seq 100); do [ -s /tmp/answer ] && break; sleep 0.1; done; cat /tmp/answer /tmp/v; sha256sum -c /tmp/shmsum`, pid))
		if lines := strings.Fields(got); len(lines) < 2 || lines[0] != lines[1] || !strings.Contains(got, "/dev/shm/blob: OK") {
			t.Fatalf("after the restore the holder %d and /dev/shm said %q, want its value twice and the blob OK", pid, got)
		}
		_, evs = callRaw(t, s, "/events/sandboxes/"+id+"?type=sandbox.lifecycle.resumed")
		if !strings.Contains(evs, `"kind":"snapshot"`) {
			t.Errorf("the resumed event does not say it restored a snapshot: %s", evs)
		}
		if code, _ := call(t, s, http.MethodDelete, "/sandboxes/"+id, nil); code != http.StatusNoContent {
			t.Errorf("kill: %d", code)
		}
		waitGone(t, id)
	})
	t.Run("a freeze keeps the memory in place", func(t *testing.T) {
		s := covetest.Start(t, "")
		id := create(t, s)
		if code, body := call(t, s, http.MethodPost, "/sandboxes/"+id+"/pause", map[string]any{"kind": "freeze"}); code != http.StatusNoContent {
			t.Fatalf("pause: %d %v", code, body)
		}
		if !alive(t, id) {
			t.Errorf("a frozen sandbox lost its memory cgroup")
		}
		if code, body := call(t, s, http.MethodPost, "/sandboxes/"+id+"/resume", map[string]any{"timeout": 60}); code != http.StatusCreated {
			t.Fatalf("resume: %d %v", code, body)
		}
		if out := exec(t, s, id, "echo thawed"); strings.TrimSpace(out) != "thawed" {
			t.Errorf("after the thaw: %q", out)
		}
	})
	t.Run("bad pause requests are refused naming the field and the sandbox runs on", func(t *testing.T) {
		s := covetest.Start(t, "")
		id := create(t, s)
		for _, body := range []map[string]any{{"kind": "hibernate"}, {"memory": false}} {
			code, res := call(t, s, http.MethodPost, "/sandboxes/"+id+"/pause", body)
			msg, _ := res["message"].(string)
			field := "kind"
			if _, ok := body["memory"]; ok {
				field = "memory"
			}
			if code != http.StatusBadRequest || !strings.Contains(msg, field) {
				t.Errorf("pause %v: %d %q, want 400 naming %s", body, code, msg, field)
			}
		}
		if out := exec(t, s, id, "echo running"); strings.TrimSpace(out) != "running" {
			t.Errorf("the sandbox after refused pauses: %q", out)
		}
	})
}
