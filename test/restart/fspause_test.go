package restart

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cove-dev/cove/internal/covetest"
	"github.com/cove-dev/cove/internal/sandbox/runtime"
)

// TestFilesystemPause drives E2B's pause({keepMemory: false}) over REST: the sandbox keeps
// its files and loses its processes, survives a server crash paused, is not resumed by
// traffic, and its resume cold-boots it with the same environment.
func TestFilesystemPause(t *testing.T) {
	covetest.Skip(t)
	t.Run("a file survives the pause and a crash and a background process does not and the env comes back", func(t *testing.T) {
		s := covetest.StartWith(t, "", covetest.Options{OnStop: "kill"})
		code, body := call(t, s, http.MethodPost, "/sandboxes", map[string]any{"templateID": "base", "timeout": 120, "envVars": map[string]string{"FS_PAUSE_VAR": "kept-value"}})
		if code != http.StatusCreated {
			t.Fatalf("create: %d %v", code, body)
		}
		id := body["sandboxID"].(string)
		exec(t, s, id, `echo written-before > /home/user/kept.txt 2>/dev/null || echo written-before > /root/kept.txt; echo written-before > /tmp/kept.txt`)
		pid := background(t, s, id, `echo $$ > /tmp/sleeper.pid; exec sleep 1000`)
		waitFor(t, 20e9, "the sleeper wrote its pid", func() bool {
			_, err := os.Stat(filepath.Join(merged(s, id), "tmp/sleeper.pid"))
			return err == nil
		})
		if code, body := call(t, s, http.MethodPost, "/sandboxes/"+id+"/pause", map[string]any{"memory": false}); code != http.StatusNoContent {
			t.Fatalf("pause with memory false: %d %v", code, body)
		}
		if alive(t, id) {
			t.Error("the sandbox paused without memory still has its memory cgroup")
		}
		if _, err := os.Stat(filepath.Join(s.DataDir, "sandboxes", id, "upper", "tmp", "kept.txt")); err != nil {
			if _, err := os.Stat(filepath.Join(s.DataDir, "sandboxes", id, "disk.img")); err != nil {
				t.Errorf("the paused sandbox's files are not kept: %v", err)
			}
		}
		_, evs := callRaw(t, s, "/events/sandboxes/"+id+"?type=sandbox.lifecycle.paused")
		if !strings.Contains(evs, `"kind":"filesystem"`) || !strings.Contains(evs, `"snapshot_bytes"`) {
			t.Errorf("the paused event does not say it kept the files and their size: %s", evs)
		}
		if code, body := call(t, s, http.MethodGet, "/sandboxes/"+id, nil); code != http.StatusOK || body["state"] != "paused" {
			t.Fatalf("GET: %d %v, want it paused", code, body)
		}

		s.Crash()
		s.Restart()
		if code, body := call(t, s, http.MethodGet, "/sandboxes/"+id, nil); code != http.StatusOK || body["state"] != "paused" {
			t.Fatalf("GET after the restart: %d %v, want it paused", code, body)
		}
		// Traffic does not resume it, and says why.
		req, _ := http.NewRequest(http.MethodGet, s.URL+"/health", nil)
		req.Header.Set("E2b-Sandbox-Id", id)
		req.Header.Set("E2b-Sandbox-Port", "49983")
		req.Header.Set("X-API-Key", s.Key)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode < 400 || !strings.Contains(string(b), "without its memory") {
			t.Errorf("traffic to the sandbox paused without memory: %d %s, want a refusal saying why", res.StatusCode, b)
		}
		if code, body := call(t, s, http.MethodGet, "/sandboxes/"+id, nil); code != http.StatusOK || body["state"] != "paused" {
			t.Fatalf("GET after traffic: %d %v, want it still paused", code, body)
		}

		// The npm SDK's onResume: 'reboot' is what this resume does anyway.
		if code, body := call(t, s, http.MethodPost, "/sandboxes/"+id+"/connect", map[string]any{"timeout": 60, "memory": false}); code != http.StatusCreated {
			t.Fatalf("connect with memory false: %d %v, want 201 (resumed)", code, body)
		}
		got := exec(t, s, id, `cat /tmp/kept.txt; echo "env=$FS_PAUSE_VAR"; if kill -0 $(cat /tmp/sleeper.pid) 2>/dev/null && [ "$(cat /proc/$(cat /tmp/sleeper.pid)/comm)" = sleep ]; then echo sleeper-alive; else echo sleeper-gone; fi`)
		for _, want := range []string{"written-before", "env=kept-value", "sleeper-gone"} {
			if !strings.Contains(got, want) {
				t.Errorf("after the reboot (sleeper was pid %d) the sandbox said %q, want %q in it", pid, got, want)
			}
		}
		_, evs = callRaw(t, s, "/events/sandboxes/"+id+"?type=sandbox.lifecycle.resumed")
		if !strings.Contains(evs, `"kind":"filesystem"`) || !strings.Contains(evs, `"rebooted":true`) {
			t.Errorf("the resumed event does not say it rebooted: %s", evs)
		}
		if code, _ := call(t, s, http.MethodDelete, "/sandboxes/"+id, nil); code != http.StatusNoContent {
			t.Errorf("kill: %d", code)
		}
		waitGone(t, id)
		if _, err := os.Stat(filepath.Join(s.DataDir, "sandboxes", id)); err == nil {
			t.Error("the killed sandbox's directory is left")
		}
	})
	t.Run("a sandbox killed while paused without memory leaves nothing", func(t *testing.T) {
		s := covetest.Start(t, "")
		id := create(t, s)
		if code, body := call(t, s, http.MethodPost, "/sandboxes/"+id+"/pause", map[string]any{"memory": false}); code != http.StatusNoContent {
			t.Fatalf("pause: %d %v", code, body)
		}
		if code, _ := call(t, s, http.MethodDelete, "/sandboxes/"+id, nil); code != http.StatusNoContent {
			t.Errorf("kill: %d", code)
		}
		waitGone(t, id)
		if _, err := os.Stat(filepath.Join(s.DataDir, "sandboxes", id)); err == nil {
			t.Error("the killed sandbox's kept files are left")
		}
	})
	t.Run("autoPauseMemory false with autoResume is refused naming the field", func(t *testing.T) {
		s := covetest.Start(t, "")
		code, body := call(t, s, http.MethodPost, "/sandboxes", map[string]any{"templateID": "base", "autoPause": true, "autoPauseMemory": false, "autoResume": map[string]any{"enabled": true}})
		if code != http.StatusBadRequest || !strings.Contains(body["message"].(string), "autoPauseMemory") {
			t.Errorf("create: %d %v, want 400 naming autoPauseMemory", code, body)
		}
	})
}

// TestOfficialSDKFilesystemPause runs test/compat/fspause.test.mjs: the npm SDK's
// pause({ keepMemory: false }), its lifecycle keepMemory: false and Sandbox.connect, on
// each runtime.
func TestOfficialSDKFilesystemPause(t *testing.T) {
	covetest.Skip(t)
	covetest.EachRuntime(t, func(t *testing.T, _ runtime.Engine) {
		s := covetest.Start(t, "")
		covetest.RunSDKScenarios(t, "fspause.test.mjs", s.URL, s.Key)
	})
}
