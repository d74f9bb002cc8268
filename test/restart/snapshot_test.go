package restart

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/covetest"
	"github.com/cove-dev/cove/internal/sandbox/network/nettest"
	cove "github.com/cove-dev/cove/sdk"
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
		s := covetest.StartWith(t, "", covetest.Options{OnStop: "kill"})
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
		for _, body := range []map[string]any{{"kind": "hibernate"}, {"memory": false, "kind": "freeze"}} {
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
		if code, res := call(t, s, http.MethodPost, "/sandboxes/"+id+"/connect", map[string]any{"memory": false}); code != http.StatusBadRequest || !strings.Contains(fmt.Sprint(res["message"]), "memory") {
			t.Errorf("connect with memory false (onResume: 'reboot'): %d %v, want 400 naming memory", code, res)
		}
		if out := exec(t, s, id, "echo running"); strings.TrimSpace(out) != "running" {
			t.Errorf("the sandbox after refused pauses: %q", out)
		}
	})
}

// holderAnswer asks the holder (pid in sandbox id) for the value in its memory.
func holderAnswer(t *testing.T, s *covetest.Server, id string, pid uint32) string {
	t.Helper()
	got := exec(t, s, id, fmt.Sprintf(`rm -f /tmp/answer; kill -USR1 %d && for i in $(seq 100); do [ -s /tmp/answer ] && break; sleep 0.1; done; cat /tmp/answer`, pid))
	return strings.TrimSpace(got)
}

func TestForkAndSnapshots(t *testing.T) {
	covetest.Skip(t)
	skipWithoutCRIU(t)
	s := covetest.Start(t, "")
	parent := create(t, s)
	pid := background(t, s, parent, holder)
	waitFor(t, 20*time.Second, "the holder wrote its value", func() bool {
		_, err := os.Stat(filepath.Join(merged(s, parent), "tmp/v"))
		return err == nil
	})
	value := strings.TrimSpace(exec(t, s, parent, "cat /tmp/v"))
	_, before := call(t, s, http.MethodGet, "/sandboxes/"+parent, nil)

	t.Run("fork with count 2 gives two copies with the parent's memory and files that are independent after", func(t *testing.T) {
		code, raw := callJSON(t, s, http.MethodPost, "/sandboxes/"+parent+"/fork", map[string]any{"count": 2, "timeout": 120})
		if code != http.StatusCreated {
			t.Fatalf("fork: %d %s", code, raw)
		}
		var results []struct {
			Sandbox *struct {
				SandboxID string `json:"sandboxID"`
			} `json:"sandbox"`
			Error *struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(raw), &results); err != nil || len(results) != 2 {
			t.Fatalf("fork answered %s (%v), want two results", raw, err)
		}
		var kids []string
		for _, r := range results {
			if r.Error != nil || r.Sandbox == nil {
				t.Fatalf("a fork failed: %s", raw)
			}
			kids = append(kids, r.Sandbox.SandboxID)
		}
		_, after := call(t, s, http.MethodGet, "/sandboxes/"+parent, nil)
		if after["state"] != "running" || after["endAt"] != before["endAt"] {
			t.Errorf("the parent after the fork: %v, want running with the same endAt %v", after, before["endAt"])
		}
		for _, id := range append([]string{parent}, kids...) {
			if got := holderAnswer(t, s, id, pid); got != value {
				t.Errorf("the holder in %s answered %q, want the parent's %q", id, got, value)
			}
		}
		exec(t, s, kids[0], "echo only-in-the-first > /tmp/mine")
		for _, id := range []string{parent, kids[1]} {
			if out := exec(t, s, id, "cat /tmp/mine 2>/dev/null || echo absent"); strings.TrimSpace(out) != "absent" {
				t.Errorf("a file written in fork %s shows in %s: %q", kids[0], id, out)
			}
		}
		for _, id := range kids {
			call(t, s, http.MethodDelete, "/sandboxes/"+id, nil)
			waitGone(t, id)
		}
	})

	t.Run("a snapshot starts sandboxes with its memory; it is listed until deleted", func(t *testing.T) {
		code, raw := callJSON(t, s, http.MethodPost, "/sandboxes/"+parent+"/snapshots", map[string]any{"name": "after-setup"})
		if code != http.StatusCreated {
			t.Fatalf("create snapshot: %d %s", code, raw)
		}
		var info struct {
			SnapshotID string   `json:"snapshotID"`
			Names      []string `json:"names"`
			SizeBytes  int64    `json:"sizeBytes"`
		}
		if err := json.Unmarshal([]byte(raw), &info); err != nil || info.SnapshotID == "" || info.SizeBytes <= 0 {
			t.Fatalf("snapshot answer %s: %v", raw, err)
		}
		if _, list := callRaw(t, s, "/snapshots?sandboxID="+parent); !strings.Contains(list, info.SnapshotID) {
			t.Errorf("GET /snapshots does not list %s: %s", info.SnapshotID, list)
		}
		code, body := call(t, s, http.MethodPost, "/sandboxes", map[string]any{"templateID": info.SnapshotID, "timeout": 120})
		if code != http.StatusCreated {
			t.Fatalf("create from the snapshot: %d %v", code, body)
		}
		child := body["sandboxID"].(string)
		if got := holderAnswer(t, s, child, pid); got != value {
			t.Errorf("the holder in the sandbox from the snapshot answered %q, want %q", got, value)
		}
		call(t, s, http.MethodDelete, "/sandboxes/"+child, nil)
		waitGone(t, child)
		if code, _ := callJSON(t, s, http.MethodDelete, "/snapshots/"+info.SnapshotID, nil); code != http.StatusNoContent {
			t.Fatalf("delete snapshot: %d", code)
		}
		if _, list := callRaw(t, s, "/snapshots"); strings.Contains(list, info.SnapshotID) {
			t.Errorf("a deleted snapshot is still listed: %s", list)
		}
		if code, _ := call(t, s, http.MethodPost, "/sandboxes", map[string]any{"templateID": info.SnapshotID}); code != http.StatusNotFound {
			t.Errorf("create from a deleted snapshot: %d, want 404", code)
		}
	})

	t.Run("/metrics has histograms of snapshot time and bytes and of restore time", func(t *testing.T) {
		res, err := http.Get(s.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		for _, m := range []string{"cove_snapshot_seconds_count", "cove_snapshot_bytes_count", "cove_restore_seconds_count"} {
			line := ""
			for _, l := range strings.Split(string(b), "\n") {
				if strings.HasPrefix(l, m+" ") {
					line = l
				}
			}
			if line == "" || strings.HasSuffix(line, " 0") {
				t.Errorf("%s after forks and a snapshot: %q", m, line)
			}
		}
	})
}

// callJSON makes a call and returns the status and raw body.
func callJSON(t *testing.T, s *covetest.Server, method, path string, body any) (int, string) {
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
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

func TestASnapshotThatDoesNotFitFailsThePauseAndTheSandboxRunsOn(t *testing.T) {
	covetest.Skip(t)
	skipWithoutCRIU(t)
	// The data dir on a small tmpfs; unmounted after the server's own cleanup (cleanups run
	// last registered first).
	dir := t.TempDir()
	if out, err := osexec.Command("mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("mount a tmpfs for the data dir: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = osexec.Command("umount", "-l", dir).Run() })
	s := covetest.Start(t, dir)
	id := create(t, s)
	exec(t, s, id, "head -c 48M /dev/urandom > /dev/shm/fill")
	code, body := call(t, s, http.MethodPost, "/sandboxes/"+id+"/pause", map[string]any{})
	msg, _ := body["message"].(string)
	if code != http.StatusInsufficientStorage || !strings.Contains(msg, "runs on") {
		t.Fatalf("pause with no room for the snapshot: %d %q, want 507 saying the sandbox runs on", code, msg)
	}
	if code, body := call(t, s, http.MethodGet, "/sandboxes/"+id, nil); code != http.StatusOK || body["state"] != "running" {
		t.Fatalf("after the failed pause: %d %v, want it running", code, body)
	}
	if out := exec(t, s, id, "echo still-here; ls /dev/shm"); !strings.Contains(out, "still-here") || !strings.Contains(out, "fill") {
		t.Errorf("the sandbox after the failed pause: %q", out)
	}
	if onDisk(s, id) {
		t.Errorf("the failed snapshot's images were left on the disk")
	}
	code, raw := callJSON(t, s, http.MethodPost, "/sandboxes/"+id+"/snapshots", map[string]any{})
	if code != http.StatusInsufficientStorage || !strings.Contains(raw, "runs on") {
		t.Errorf("createSnapshot with no room: %d %s, want 507 saying the sandbox runs on", code, raw)
	}
	if left, _ := os.ReadDir(filepath.Join(s.DataDir, "snapshots")); len(left) != 0 {
		t.Errorf("the failed snapshot left files: %v", left)
	}
	// With room again the same sandbox pauses and resumes: nothing was lost on the way.
	exec(t, s, id, "rm /dev/shm/fill; echo kept > /home/user/kept")
	if code, body := call(t, s, http.MethodPost, "/sandboxes/"+id+"/pause", map[string]any{}); code != http.StatusNoContent {
		t.Fatalf("pause with room again: %d %v", code, body)
	}
	if code, body := call(t, s, http.MethodPost, "/sandboxes/"+id+"/connect", map[string]any{"timeout": 60}); code != http.StatusCreated {
		t.Fatalf("connect: %d %v", code, body)
	}
	if out := exec(t, s, id, "cat /home/user/kept"); strings.TrimSpace(out) != "kept" {
		t.Errorf("after a pause and resume with room again: %q", out)
	}
}

// adminDisk runs `cove admin disk --json` and returns the team's line (zero when it has none).
func adminDisk(t *testing.T, s *covetest.Server, team string) cove.DiskUsage {
	t.Helper()
	out, err := osexec.Command(covetest.Binary(t), "admin", "disk", "--json", "--data", s.DataDir, "--api-url", s.URL).CombinedOutput()
	if err != nil {
		t.Fatalf("cove admin disk: %v\n%s", err, out)
	}
	var all []cove.DiskUsage
	if err := json.Unmarshal(out, &all); err != nil {
		t.Fatalf("cove admin disk --json: %v\n%s", err, out)
	}
	for _, u := range all {
		if u.TeamID == team {
			return u
		}
	}
	return cove.DiskUsage{TeamID: team}
}

// metricLine returns the value of the /metrics sample whose line starts with prefix, or "".
func metricLine(t *testing.T, s *covetest.Server, prefix string) string {
	t.Helper()
	_, b := callRaw(t, s, "/metrics")
	for _, l := range strings.Split(b, "\n") {
		if strings.HasPrefix(l, prefix) {
			return strings.TrimSpace(strings.TrimPrefix(l, prefix))
		}
	}
	return ""
}

func parseFloat(s string) float64 {
	f, _ := strconv.ParseFloat(s, 64)
	return f
}

func TestSnapshotDiskIsCountedPerTeamAndGoesWithItsSandboxOrSnapshot(t *testing.T) {
	covetest.Skip(t)
	skipWithoutCRIU(t)
	s := covetest.Start(t, "")
	var teams []struct {
		TeamID string `json:"teamID"`
	}
	if _, raw := callRaw(t, s, "/teams"); json.Unmarshal([]byte(raw), &teams) != nil || len(teams) != 1 {
		t.Fatalf("GET /teams: %s", raw)
	}
	team := teams[0].TeamID
	id := create(t, s)
	// 32 MB of touched zeros and 8 MB of random bytes in a process's memory.
	background(t, s, id, `python3 -c 'import os,time; z=bytearray(32<<20); z[::4096]=b"\0"*len(z[::4096]); r=os.urandom(8<<20); open("/tmp/ready","w").write("1"); time.sleep(100000)'`)
	waitFor(t, 30*time.Second, "the holder touched its memory", func() bool {
		_, err := os.Stat(filepath.Join(merged(s, id), "tmp/ready"))
		return err == nil
	})
	sandboxDir := filepath.Join(s.DataDir, "sandboxes", id)

	t.Run("a snapshot pause is counted for its team at its size on disk, zero pages not counted", func(t *testing.T) {
		if code, body := call(t, s, http.MethodPost, "/sandboxes/"+id+"/pause", map[string]any{}); code != http.StatusNoContent {
			t.Fatalf("pause: %d %v", code, body)
		}
		var evs []struct {
			Data struct {
				SnapshotBytes int64 `json:"snapshot_bytes"`
			} `json:"eventData"`
		}
		if _, raw := callRaw(t, s, "/events/sandboxes/"+id+"?type=sandbox.lifecycle.paused"); json.Unmarshal([]byte(raw), &evs) != nil || len(evs) == 0 {
			t.Fatalf("paused events: %s", raw)
		}
		u := adminDisk(t, s, team)
		t.Logf("paused with 32 MB of zeros and 8 MB random touched: %.1f MiB on disk", float64(u.PausedBytes)/(1<<20))
		if u.PausedSandboxes != 1 || u.PausedBytes != evs[0].Data.SnapshotBytes {
			t.Errorf("admin disk %+v, want 1 paused sandbox of %d bytes (the paused event's)", u, evs[0].Data.SnapshotBytes)
		}
		if u.PausedBytes < 8<<20 || u.PausedBytes > 32<<20 {
			t.Errorf("the pause takes %d bytes: want the 8 MB of random memory on disk and not the 32 MB of zeros", u.PausedBytes)
		}
		status, err := osexec.Command(covetest.Binary(t), "admin", "status", "--data", s.DataDir, "--api-url", s.URL).CombinedOutput()
		if err != nil || !strings.Contains(string(status), "PAUSED SIZE") || !strings.Contains(string(status), team) {
			t.Errorf("cove admin status does not show the team's snapshot disk: %v\n%s", err, status)
		}
		if got := metricLine(t, s, `cove_snapshot_disk_bytes{kind="paused",team="`+team+`"} `); got == "" || parseFloat(got) != float64(u.PausedBytes) {
			t.Errorf("cove_snapshot_disk_bytes for the team's paused sandboxes: %q, want %d", got, u.PausedBytes)
		}
		if code, body := call(t, s, http.MethodPost, "/sandboxes/"+id+"/connect", map[string]any{"timeout": 120}); code != http.StatusCreated {
			t.Fatalf("connect: %d %v", code, body)
		}
		if u := adminDisk(t, s, team); u.PausedSandboxes != 0 || u.PausedBytes != 0 {
			t.Errorf("after the resume: %+v, want nothing paused", u)
		}
	})

	t.Run("a snapshot is counted and listed at its size and its files go with it", func(t *testing.T) {
		code, raw := callJSON(t, s, http.MethodPost, "/sandboxes/"+id+"/snapshots", map[string]any{"name": "disk"})
		var info struct {
			SnapshotID string `json:"snapshotID"`
			SizeBytes  int64  `json:"sizeBytes"`
		}
		if code != http.StatusCreated || json.Unmarshal([]byte(raw), &info) != nil {
			t.Fatalf("create snapshot: %d %s", code, raw)
		}
		out, err := osexec.Command(covetest.Binary(t), "snapshot", "ls", "--api-url", s.URL, "--api-key", s.Key).CombinedOutput()
		if err != nil || !strings.Contains(string(out), info.SnapshotID) || !strings.Contains(string(out), fmt.Sprintf("%.1f MiB", float64(info.SizeBytes)/(1<<20))) {
			t.Errorf("cove snapshot ls does not show %s at %d bytes: %v\n%s", info.SnapshotID, info.SizeBytes, err, out)
		}
		if u := adminDisk(t, s, team); u.Snapshots != 1 || u.SnapshotBytes != info.SizeBytes {
			t.Errorf("admin disk %+v, want 1 snapshot of %d bytes", u, info.SizeBytes)
		}
		dir := filepath.Join(s.DataDir, "snapshots", info.SnapshotID)
		if _, err := os.Stat(dir); err != nil {
			t.Fatalf("the snapshot's files: %v", err)
		}
		if code, _ := callJSON(t, s, http.MethodDelete, "/snapshots/"+info.SnapshotID, nil); code != http.StatusNoContent {
			t.Fatalf("delete snapshot: %d", code)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the deleted snapshot's files are still there: %v", err)
		}
		if u := adminDisk(t, s, team); u.Snapshots != 0 || u.SnapshotBytes != 0 {
			t.Errorf("after the delete: %+v, want no snapshot", u)
		}
	})

	t.Run("a paused sandbox's snapshot goes with its kill and no files are left", func(t *testing.T) {
		if code, body := call(t, s, http.MethodPost, "/sandboxes/"+id+"/pause", map[string]any{}); code != http.StatusNoContent {
			t.Fatalf("pause: %d %v", code, body)
		}
		if !onDisk(s, id) {
			t.Fatalf("the paused sandbox is not on disk")
		}
		if code, _ := call(t, s, http.MethodDelete, "/sandboxes/"+id, nil); code != http.StatusNoContent {
			t.Fatalf("kill: %d", code)
		}
		waitGone(t, id)
		if _, err := os.Stat(sandboxDir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the killed sandbox's directory is still there: %v", err)
		}
		left, _ := os.ReadDir(filepath.Join(s.DataDir, "snapshots"))
		for _, e := range left {
			t.Errorf("left in the snapshots directory: %s", e.Name())
		}
		if u := adminDisk(t, s, team); u.PausedSandboxes != 0 || u.PausedBytes != 0 || u.Snapshots != 0 {
			t.Errorf("after the kill: %+v, want nothing", u)
		}
	})
}

func TestForksAndSandboxesFromASnapshotAreMaskedOfTheirOriginsSecrets(t *testing.T) {
	covetest.Skip(t)
	skipWithoutCRIU(t)
	s := covetest.Start(t, "")
	const secret = "origin-env-secret-9191919191"
	code, body := call(t, s, http.MethodPost, "/sandboxes", map[string]any{"templateID": "base", "timeout": 120,
		"envVars": map[string]string{"DB_PASSWORD": secret}})
	if code != http.StatusCreated {
		t.Fatalf("create: %d %v", code, body)
	}
	parent := body["sandboxID"].(string)
	code, raw := callJSON(t, s, http.MethodPost, "/sandboxes/"+parent+"/fork", map[string]any{"count": 1, "timeout": 120})
	var forks []struct {
		Sandbox *struct {
			SandboxID string `json:"sandboxID"`
		} `json:"sandbox"`
	}
	if code != http.StatusCreated || json.Unmarshal([]byte(raw), &forks) != nil || len(forks) != 1 || forks[0].Sandbox == nil {
		t.Fatalf("fork: %d %s", code, raw)
	}
	code, raw = callJSON(t, s, http.MethodPost, "/sandboxes/"+parent+"/snapshots", map[string]any{})
	var sn struct {
		SnapshotID string `json:"snapshotID"`
	}
	if code != http.StatusCreated || json.Unmarshal([]byte(raw), &sn) != nil {
		t.Fatalf("create snapshot: %d %s", code, raw)
	}
	code, body = call(t, s, http.MethodPost, "/sandboxes", map[string]any{"templateID": sn.SnapshotID, "timeout": 120})
	if code != http.StatusCreated {
		t.Fatalf("create from the snapshot: %d %v", code, body)
	}
	for what, id := range map[string]string{"the fork": forks[0].Sandbox.SandboxID, "the sandbox from the snapshot": body["sandboxID"].(string)} {
		t.Run(what+" has the origin's secret env and its output is masked of it", func(t *testing.T) {
			if out := exec(t, s, id, `echo "copy says $DB_PASSWORD"`); strings.TrimSpace(out) != "copy says "+secret {
				t.Fatalf("the copy's env: %q", out)
			}
			var logs string
			waitFor(t, 30*time.Second, "the copy's line in the log store", func() bool {
				_, logs = callRaw(t, s, "/v2/sandboxes/"+id+"/logs?limit=1000")
				return strings.Contains(logs, "copy says")
			})
			_, cmds := callRaw(t, s, "/sandboxes/"+id+"/commands")
			if !strings.Contains(logs, "copy says [REDACTED:exact]") || strings.Contains(logs+cmds, secret) {
				t.Errorf("the copy's logs and records hold the origin's secret:\n%s\n%s", logs, cmds)
			}
		})
	}
	if code, _ := callJSON(t, s, http.MethodDelete, "/snapshots/"+sn.SnapshotID, nil); code != http.StatusNoContent {
		t.Errorf("delete snapshot: %d", code)
	}
	if _, err := os.Stat(filepath.Join(s.DataDir, "vault", sn.SnapshotID)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the deleted snapshot's kept secrets are still on disk: %v", err)
	}
}

// TestCopiesKeepTheirOriginsNetwork: a fork and a sandbox started from a snapshot get the
// network config of the sandbox they were copied from (each in a namespace of its own).
func TestCopiesKeepTheirOriginsNetwork(t *testing.T) {
	covetest.Skip(t)
	skipWithoutCRIU(t)
	in := nettest.New(t)
	s := covetest.Start(t, "")
	open := create(t, s)
	if code := curlExit(t, s, open, in.URL("http", "/")); code != 0 {
		t.Fatalf("a sandbox without rules cannot reach the test host (curl exited %d): the checks below would prove nothing", code)
	}
	parent := createWith(t, s, map[string]any{"denyOut": []string{"0.0.0.0/0"}, "allowPublicTraffic": false})
	forkOne := func(t *testing.T) string {
		t.Helper()
		code, raw := callJSON(t, s, http.MethodPost, "/sandboxes/"+parent+"/fork", map[string]any{"count": 1, "timeout": 120})
		var results []struct {
			Sandbox *struct {
				SandboxID string `json:"sandboxID"`
			} `json:"sandbox"`
		}
		if err := json.Unmarshal([]byte(raw), &results); code != http.StatusCreated || err != nil || len(results) != 1 || results[0].Sandbox == nil {
			t.Fatalf("fork: %d %s", code, raw)
		}
		return results[0].Sandbox.SandboxID
	}
	fromSnapshot := func(t *testing.T) string {
		t.Helper()
		code, raw := callJSON(t, s, http.MethodPost, "/sandboxes/"+parent+"/snapshots", map[string]any{})
		var sn struct {
			SnapshotID string `json:"snapshotID"`
		}
		if err := json.Unmarshal([]byte(raw), &sn); code != http.StatusCreated || err != nil {
			t.Fatalf("snapshot: %d %s", code, raw)
		}
		t.Cleanup(func() { callJSON(t, s, http.MethodDelete, "/snapshots/"+sn.SnapshotID, nil) })
		code, body := call(t, s, http.MethodPost, "/sandboxes", map[string]any{"templateID": sn.SnapshotID, "timeout": 120})
		if code != http.StatusCreated {
			t.Fatalf("create from the snapshot: %d %v", code, body)
		}
		return body["sandboxID"].(string)
	}
	for _, tc := range []struct {
		name string
		copy func(*testing.T) string
	}{
		{"a fork of a sandbox with denyOut 0.0.0.0/0 cannot reach the test host, and getInfo echoes the rule", forkOne},
		{"a sandbox from a snapshot of it cannot either, and getInfo echoes the rule", fromSnapshot},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := tc.copy(t)
			t.Cleanup(func() { call(t, s, http.MethodDelete, "/sandboxes/"+id, nil); waitGone(t, id) })
			if code := curlExit(t, s, id, in.URL("http", "/")); code == 0 {
				t.Errorf("copy %s reached the test host its origin's denyOut 0.0.0.0/0 refuses", id)
			}
			_, info := call(t, s, http.MethodGet, "/sandboxes/"+id, nil)
			netw, _ := info["network"].(map[string]any)
			if !strings.Contains(fmt.Sprint(netw["denyOut"]), "0.0.0.0/0") || netw["allowPublicTraffic"] != false {
				t.Errorf("getInfo of copy %s: network %v, want its origin's denyOut 0.0.0.0/0 and allowPublicTraffic false", id, info["network"])
			}
		})
	}
	if code := curlExit(t, s, parent, in.URL("http", "/")); code == 0 {
		t.Errorf("the parent reached the test host after its copies were made")
	}
}
