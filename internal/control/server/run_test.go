package server

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/control/console"
	"github.com/cove-dev/cove/internal/covetest"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/store"
	cove "github.com/cove-dev/cove/sdk"
	"github.com/cove-dev/cove/sdk/reason"
)

// running is a `cove server` run in-process by Run, on its own data dir and the shared test
// template store: real runc sandboxes, nothing faked.
type running struct {
	url, key, dataDir string
	progress, logs    *covetest.Buffer
	cancel            context.CancelFunc
	done              chan error
}

func startRun(t *testing.T, dataDir string) *running {
	t.Helper()
	covetest.Skip(t)
	r := &running{dataDir: dataDir, progress: &covetest.Buffer{}, logs: &covetest.Buffer{}, done: make(chan error, 1)}
	ready := make(chan struct{})
	var once sync.Once
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	cfg := Config{Addr: "127.0.0.1:0", DataDir: dataDir, TemplateDir: covetest.Templates(t), NoBuild: true, CoveBinary: covetest.Binary(t),
		SampleInterval: 50 * time.Millisecond, Logger: telemetry.NewLogger(r.logs, slog.LevelDebug),
		RecordHeadBytes: 1024, RecordTailBytes: 1024,
		// Kill at stop, so the package leaves no sandbox behind (test/restart covers keep).
		OnStop: StopKill,
		Ready: func(addr, key string) {
			once.Do(func() { r.url, r.key = "http://"+addr, key; close(ready) })
		}}
	go func() { r.done <- Run(ctx, cfg, r.progress) }()
	select {
	case <-ready:
	case err := <-r.done:
		t.Fatalf("Run ended before serving: %v\n%s", err, r.progress)
	case <-time.After(2 * time.Minute):
		t.Fatalf("Run did not serve within 2 minutes\n%s", r.progress)
	}
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop cancels Run and waits for it to return; safe to call twice.
func (r *running) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case err, ok := <-r.done:
		if ok && err != nil {
			t.Errorf("Run: %v", err)
		}
		if ok {
			close(r.done)
		}
	case <-time.After(time.Minute):
		t.Error("Run did not return within a minute of its context's end")
	}
}

func (r *running) client(key string) *cove.Client {
	return cove.NewClient(cove.Config{APIURL: r.url, APIKey: key, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
}

// get does a GET with the key and request id and returns the status and body.
func (r *running) get(t *testing.T, key, path, requestID string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, r.url+path, nil)
	if key != "" {
		req.Header.Set("X-API-Key", key)
	}
	if requestID != "" {
		req.Header.Set(telemetry.HeaderRequestID, requestID)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

func TestRunServesEveryRoomOnOnePort(t *testing.T) {
	r := startRun(t, t.TempDir())
	ctx := context.Background()
	c := r.client(r.key)

	t.Run("the first run prints the SDK's variables with a new key, kept root-only", func(t *testing.T) {
		if !strings.Contains(r.progress.String(), "export E2B_API_URL="+r.url) || !strings.Contains(r.progress.String(), "E2B_API_KEY="+r.key) {
			t.Errorf("progress:\n%s", r.progress)
		}
		for _, f := range []string{KeyFile(r.dataDir), AdminTokenFile(r.dataDir)} {
			st, err := os.Stat(f)
			if err != nil || st.Mode().Perm() != 0o600 {
				t.Errorf("%s: %v %v", f, st.Mode(), err)
			}
		}
	})

	sb, err := c.Create(ctx, cove.SandboxOptions{Metadata: map[string]string{"task": "t-1"}})
	if err != nil {
		t.Fatalf("create: %v\n%s", err, r.logs)
	}
	res, err := sb.Commands.Run(ctx, "echo hi")
	if err != nil || res.Stdout != "hi\n" {
		t.Fatalf("run: %+v %v", res, err)
	}

	otherKey := func() string {
		db, err := OpenStore(ctx, r.dataDir, "")
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		team, err := db.CreateTeam(ctx, "other")
		if err != nil {
			t.Fatal(err)
		}
		key, _, err := db.CreateAPIKey(ctx, team.ID, "other")
		if err != nil {
			t.Fatal(err)
		}
		return key
	}()

	routes := []struct {
		name     string
		key      string
		path     string
		wantCode int
		wantBody string
	}{
		{"health answers without a key", "", "/health", http.StatusNoContent, ""},
		{"metrics are served", "", "/metrics", http.StatusOK, "cove_sandboxes_created_total"},
		{"the sandbox's logs are served", r.key, "/v2/sandboxes/" + sb.ID + "/logs", http.StatusOK, "logs"},
		{"the sandbox's commands are served", r.key, "/sandboxes/" + sb.ID + "/commands", http.StatusOK, "echo hi"},
		{"the sandbox's events are served", r.key, "/events/sandboxes/" + sb.ID, http.StatusOK, "sandbox.lifecycle.created"},
		{"another team's sandbox logs are not found", otherKey, "/sandboxes/" + sb.ID + "/logs", http.StatusNotFound, ""},
		{"another team's sandbox metrics are not found", otherKey, "/sandboxes/" + sb.ID + "/metrics", http.StatusNotFound, ""},
		{"a call without a key is unauthorized", "", "/v2/sandboxes", http.StatusUnauthorized, ""},
		{"the console is served under its prefix", "", console.Prefix, http.StatusOK, ""},
	}
	for _, tt := range routes {
		t.Run(tt.name, func(t *testing.T) {
			code, body := r.get(t, tt.key, tt.path, "")
			if code != tt.wantCode || !strings.Contains(body, tt.wantBody) {
				t.Errorf("GET %s: %d %.300s; want %d with %q", tt.path, code, body, tt.wantCode, tt.wantBody)
			}
		})
	}

	t.Run("the sampler samples the running sandbox", func(t *testing.T) {
		deadline := time.Now().Add(30 * time.Second)
		for {
			m, err := sb.Metrics(ctx, time.Time{}, time.Time{})
			if err == nil && len(m) > 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("no samples: %v", err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	})

	t.Run("the proxy reaches the sandbox's envd", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodGet, r.url+"/health", nil)
		req.Header.Set("E2b-Sandbox-Id", sb.ID)
		req.Header.Set("E2b-Sandbox-Port", "49983")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusNoContent {
			t.Errorf("envd health through the proxy: %s", res.Status)
		}
	})

	t.Run("a kill's trace joins the API's, orchestrator's lines and the event", func(t *testing.T) {
		if err := c.Kill(cove.WithRequestID(ctx, "req-kill-1"), sb.ID); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			code, body := r.get(t, r.key, "/traces/req-kill-1", "")
			if code == http.StatusOK && strings.Contains(body, `"message":"sandbox killed"`) && strings.Contains(body, `"message":"sandbox.lifecycle.killed"`) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("trace: %d %s", code, body)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if code, body := r.get(t, otherKey, "/traces/req-kill-1", ""); code != http.StatusOK || strings.Contains(body, "sandbox killed") {
			t.Errorf("another team sees the trace: %d %s", code, body)
		}
	})

	t.Run("a killed sandbox's logs and metrics stay readable", func(t *testing.T) {
		for _, p := range []string{"/sandboxes/" + sb.ID + "/logs", "/sandboxes/" + sb.ID + "/metrics"} {
			if code, body := r.get(t, r.key, p, ""); code != http.StatusOK {
				t.Errorf("GET %s: %d %s", p, code, body)
			}
		}
	})

	t.Run("the API counts its requests on /metrics", func(t *testing.T) {
		_, body := r.get(t, "", "/metrics", "")
		if !strings.Contains(body, "cove_api_requests_total{") || !strings.Contains(body, "cove_proxy_requests_total{") {
			t.Errorf("metrics lack the request counters")
		}
	})

	t.Run("a second server on the same data dir is refused", func(t *testing.T) {
		err := Run(ctx, Config{Addr: "127.0.0.1:0", DataDir: r.dataDir, TemplateDir: covetest.Templates(t), NoBuild: true,
			Logger: telemetry.NewLogger(io.Discard, nil)}, nil)
		if !errors.Is(err, ErrDataDirInUse) {
			t.Errorf("second Run: %v, want ErrDataDirInUse", err)
		}
	})

	live, err := c.Create(ctx, cove.SandboxOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r.stop(t)

	t.Run("stopping kills the live sandboxes for server_shutdown", func(t *testing.T) {
		db, err := OpenStore(ctx, r.dataDir, "")
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		rec, err := db.GetSandbox(ctx, live.ID)
		if err != nil || rec.State != store.StateKilled || rec.KillReason != reason.KillServerShutdown {
			t.Errorf("record %+v %v", rec, err)
		}
	})

	t.Run("a restart makes no new key and reads the first one", func(t *testing.T) {
		again := startRun(t, r.dataDir)
		if again.key != r.key {
			t.Errorf("key %q after a restart, want %q", again.key, r.key)
		}
		if !strings.Contains(again.progress.String(), "a key from `cove apikey create`") {
			t.Errorf("progress:\n%s", again.progress)
		}
	})
}

func TestRunFailsClearly(t *testing.T) {
	covetest.Skip(t)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	notDir := t.TempDir() + "/file"
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		cfg     Config
		wantErr string
		// lockedOnTheWay: Run got as far as locking the data dir, which it must have released
		// (every step's closer runs when a later step fails).
		lockedOnTheWay bool
	}{
		{"an address in use names it, and what the steps before opened is closed", Config{Addr: busy.Addr().String(), DataDir: t.TempDir()}, "listen " + busy.Addr().String(), true},
		{"a data dir that is a file is an error", Config{Addr: "127.0.0.1:0", DataDir: notDir}, notDir, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.TemplateDir, tt.cfg.NoBuild = covetest.Templates(t), true
			tt.cfg.Logger = telemetry.NewLogger(io.Discard, nil)
			var progress bytes.Buffer
			err := Run(context.Background(), tt.cfg, &progress)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Run: %v, want an error naming %q", err, tt.wantErr)
			}
			if tt.lockedOnTheWay {
				lock, err := LockDataDir(tt.cfg.DataDir)
				if err != nil {
					t.Fatalf("the data dir is still locked after Run failed: %v", err)
				}
				lock.Release()
			}
		})
	}
}

func TestSandboxDomains(t *testing.T) {
	tests := []struct {
		name                string
		configured          string
		addr                net.Addr
		wantProxy, wantSBox string
	}{
		{"a configured domain is used for both", "sbx.example.test", &net.TCPAddr{Port: 3000}, "sbx.example.test", "sbx.example.test"},
		{"a configured domain with a port routes by the name and reports the port", "cove.localhost:3443", &net.TCPAddr{Port: 3443}, "cove.localhost", "cove.localhost:3443"},
		{"without one, hosts are localhost on the server's port", "", &net.TCPAddr{Port: 3000}, "localhost", "localhost:3000"},
		{"without a port, plain localhost", "", &net.UnixAddr{Name: "/run/cove.sock"}, "localhost", "localhost"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, s := SandboxDomains(tt.configured, tt.addr)
			if p != tt.wantProxy || s != tt.wantSBox {
				t.Errorf("got %q %q, want %q %q", p, s, tt.wantProxy, tt.wantSBox)
			}
		})
	}
}

func TestAdminTokenIsMadeOnceAndKept(t *testing.T) {
	dir := t.TempDir()
	a, err := adminToken(dir)
	if err != nil || !strings.HasPrefix(a, "cove_admin_") {
		t.Fatalf("token %q, %v", a, err)
	}
	b, err := adminToken(dir)
	if err != nil || b != a {
		t.Errorf("second read %q, want %q (%v)", b, a, err)
	}
	if _, err := adminToken(dir + "/missing/dir"); err == nil {
		t.Error("a token in a missing dir was written")
	}
	if got := string(trimNL([]byte("x\r\n"))); got != "x" {
		t.Errorf("trimNL: %q", got)
	}
}
