// Package compat runs the official npm e2b SDK against a real `cove envd` process, so that a
// change which breaks E2B wire compatibility fails `go test` instead of a user's program.
//
// The Go side builds the cove binary, starts `cove envd` as a child process, serves a fixture
// control plane for one sandbox, and runs envd.test.mjs under `node --test` with the SDK's
// environment variables pointing at both. The scenarios themselves live in envd.test.mjs.
package compat

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/covetest"
)

// envdVersion is what the fixture control plane reports. The SDK switches features off below
// the versions it checks (the highest, 0.6.4, gates watchDir on network mounts).
const envdVersion = "0.6.4"

func TestSDKDrivesEnvd(t *testing.T) {
	runScenarios(t, "envd.test.mjs", 5*time.Minute, "COVE_DEFAULT_USER="+defaultUser(t), "COVE_OTHER_USER="+otherUser())
}

// runScenarios runs the npm SDK scenarios of script under `node --test` against a real `cove
// envd` and a fixture control plane for its one sandbox, with env added to the SDK's
// variables, failing t when a scenario fails; it skips, saying why, without node or the SDK.
func runScenarios(t *testing.T, script string, limit time.Duration, env ...string) {
	t.Helper()
	if testing.Short() {
		t.Skip("compat test starts cove envd and node: skipped under -short")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not found on PATH: install Node.js 20+, then run `npm ci` in test/compat")
	}
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "e2b", "package.json")); err != nil {
		t.Skip("the e2b npm SDK is not installed: run `npm ci` (or `npm install`) in test/compat")
	}

	envdURL := startEnvd(t, buildCove(t))
	sandboxID := "i" + randomHex(t, 10)
	apiKey := "e2b_" + randomHex(t, 20)
	api := httptest.NewServer(fixtureControlPlane(t, sandboxID, apiKey))
	t.Cleanup(api.Close)

	ctx, cancel := context.WithTimeout(context.Background(), limit)
	if deadline, ok := t.Deadline(); ok && time.Until(deadline) < limit {
		ctx, cancel = context.WithDeadline(context.Background(), deadline.Add(-10*time.Second))
	}
	defer cancel()

	cmd := exec.CommandContext(ctx, node, "--test", "--test-reporter=spec", script)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(),
		"E2B_API_URL="+api.URL,
		"E2B_SANDBOX_URL="+envdURL,
		"E2B_API_KEY="+apiKey,
		"COVE_SANDBOX_ID="+sandboxID,
		"NO_COLOR=1",
	), env...)
	cmd.WaitDelay = 5 * time.Second
	out := covetest.NewLineLogger(t, "node: ")
	cmd.Stdout = out
	cmd.Stderr = out
	err = cmd.Run()
	out.Flush()
	if err != nil {
		t.Fatalf("node --test %s: %v (the SDK scenarios above name what failed)", script, err)
	}
}

// buildCove compiles ./cmd/cove from the module root into a temporary directory.
func buildCove(t *testing.T) string {
	t.Helper()
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	bin := filepath.Join(t.TempDir(), "cove")
	build := exec.Command("go", "build", "-o", bin, "./cmd/cove")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/cove: %v\n%s", err, out)
	}
	return bin
}

// startEnvd runs `cove envd` on a free loopback port until the test ends and returns its base
// URL once GET /health answers 204. Its stdout and stderr (JSON log lines) go to a file that is
// printed when the test fails.
func startEnvd(t *testing.T, cove string) string {
	t.Helper()
	addr := freeAddr(t)
	logPath := filepath.Join(t.TempDir(), "envd.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := envdCommand(t, cove, "envd", "--addr", addr)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	if err := cmd.Start(); err != nil {
		t.Fatalf("start cove envd: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	t.Cleanup(func() {
		stopProcess(t, cmd, exited)
		logFile.Close()
		if t.Failed() {
			logs, _ := os.ReadFile(logPath)
			t.Logf("cove envd logs (%s):\n%s", logPath, logs)
		}
	})

	url := "http://" + addr
	deadline := time.Now().Add(15 * time.Second)
	client := &http.Client{Timeout: time.Second}
	for {
		select {
		case err := <-exited:
			exited <- err // let the cleanup see it too
			t.Fatalf("cove envd exited before answering /health: %v", err)
		default:
		}
		resp, err := client.Get(url + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusNoContent {
				return url
			}
			err = fmt.Errorf("status %d, want 204", resp.StatusCode)
		}
		if time.Now().After(deadline) {
			t.Fatalf("cove envd at %s: GET /health: %v", url, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// envdCommand runs cove with args in its own process group. As root, it also gives envd a
// private mount namespace with an empty tmpfs on /root, the way a sandbox gets its template's
// home directory: every `commands.run` is a `bash -l`, and the host's own root dotfiles (a
// pyenv rehash under a lock in ~/.bashrc, say) would otherwise make root's commands slow or
// hang, and a scenario could write into the host's /root.
func envdCommand(t *testing.T, cove string, args ...string) *exec.Cmd {
	t.Helper()
	attr := &syscall.SysProcAttr{Setpgid: true}
	sh, errSh := exec.LookPath("sh")
	_, errMount := exec.LookPath("mount")
	if os.Geteuid() != 0 || errSh != nil || errMount != nil {
		t.Logf("cove envd shares the host's /root (not root, or no sh/mount)")
		cmd := exec.Command(cove, args...)
		cmd.SysProcAttr = attr
		return cmd
	}
	// Go makes the new namespace's mounts private before running sh, so the tmpfs stays in it.
	attr.Unshareflags = syscall.CLONE_NEWNS
	script := `mount -t tmpfs -o mode=0700 cove-compat-root /root && exec "$0" "$@"`
	cmd := exec.Command(sh, append([]string{"-c", script, cove}, args...)...)
	cmd.SysProcAttr = attr
	return cmd
}

// stopProcess sends SIGTERM to envd's process group (envd and anything it left running), then
// SIGKILL if envd has not exited within five seconds.
func stopProcess(t *testing.T, cmd *exec.Cmd, exited chan error) {
	pgid := cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		t.Logf("cove envd ignored SIGTERM for 5s: killing it")
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-exited
	}
	// Children that outlived envd (the SDK scenarios start background commands).
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// defaultUser is the account envd runs a command as when the SDK sends no Authorization
// header: `user` if that account exists, else the account envd itself runs as (ours).
func defaultUser(t *testing.T) string {
	if _, err := user.Lookup("user"); err == nil {
		return "user"
	}
	me, err := user.Current()
	if err != nil {
		t.Fatalf("current user: %v", err)
	}
	return me.Username
}

// otherUser names an existing unprivileged account for the run-as-user scenarios, or "" (the
// scenarios then skip) when the machine has none.
func otherUser() string {
	if _, err := user.Lookup("nobody"); err == nil {
		return "nobody"
	}
	return ""
}

// fixtureControlPlane is a TEST FIXTURE standing in for `cove server`, which does not exist
// yet: it answers the two control-plane calls Sandbox.connect and Sandbox.getInfo make, for one
// running sandbox whose envd is reached through E2B_SANDBOX_URL. Replace it with a real
// `cove server` once that exists. Any other request fails the test, so an SDK upgrade that
// starts calling something new is noticed.
func fixtureControlPlane(t *testing.T, sandboxID, apiKey string) http.Handler {
	started := time.Now().UTC()
	var mu sync.Mutex // t.Errorf from handler goroutines
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		t.Errorf("fixture control plane: "+format, args...)
	}
	writeJSON := func(w http.ResponseWriter, status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(v)
	}
	sandbox := func(w http.ResponseWriter, r *http.Request) bool {
		if got := r.Header.Get("X-API-Key"); got != apiKey {
			fail("%s %s: X-API-Key %q, want the test's key", r.Method, r.URL.Path, got)
			writeJSON(w, http.StatusUnauthorized, map[string]any{"code": 401, "message": "invalid API key"})
			return false
		}
		if id := r.PathValue("id"); id != sandboxID {
			writeJSON(w, http.StatusNotFound, map[string]any{"code": 404, "message": "sandbox " + id + " not found"})
			return false
		}
		return true
	}
	connect := func(w http.ResponseWriter, r *http.Request) {
		if !sandbox(w, r) {
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		// 200: the sandbox was already running (201 would mean it was resumed).
		writeJSON(w, http.StatusOK, map[string]any{
			"sandboxID":   sandboxID,
			"templateID":  "base",
			"clientID":    "cove-compat",
			"envdVersion": envdVersion,
			"domain":      nil,
		})
	}

	mux := http.NewServeMux()
	mux.HandleFunc("POST /sandboxes/{id}/connect", connect)
	mux.HandleFunc("POST /v2/sandboxes/{id}/connect", connect)
	mux.HandleFunc("GET /sandboxes/{id}", func(w http.ResponseWriter, r *http.Request) {
		if !sandbox(w, r) {
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{
			"sandboxID":   sandboxID,
			"templateID":  "base",
			"clientID":    "cove-compat",
			"startedAt":   started.Format(time.RFC3339),
			"endAt":       started.Add(time.Hour).Format(time.RFC3339),
			"state":       "running",
			"cpuCount":    1,
			"memoryMB":    512,
			"diskSizeMB":  1024,
			"envdVersion": envdVersion,
			"metadata":    map[string]string{},
			"domain":      nil,
		})
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fail("unexpected request %s %s", r.Method, r.URL)
		writeJSON(w, http.StatusNotFound, map[string]any{"code": 404, "message": "the compat fixture does not serve " + r.URL.Path})
	})
	return mux
}
