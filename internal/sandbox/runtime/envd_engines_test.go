package runtime_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/cove-dev/cove/internal/sandbox/runtime"
	"github.com/cove-dev/cove/internal/sandbox/runtime/runtimetest"
	pb "github.com/cove-dev/cove/sdk/gen/process"
	"github.com/cove-dev/cove/sdk/gen/process/processconnect"
)

// testTemplate returns the root and layers (topmost first) of the shared test template
// `make test-templates` builds (base, on Debian bookworm), or skips.
func testTemplate(t *testing.T) (rootfs string, layers []string) {
	t.Helper()
	dir := os.Getenv("COVE_TEST_TEMPLATES")
	if dir == "" {
		dir = "/var/lib/cove-test-templates"
	}
	metas, _ := filepath.Glob(filepath.Join(dir, "*", "base", "meta.json"))
	for _, m := range metas {
		b, err := os.ReadFile(m)
		if err != nil {
			continue
		}
		var meta struct {
			Root   string   `json:"root"`
			Layers []string `json:"layers"`
		}
		if json.Unmarshal(b, &meta) != nil || meta.Root == "" {
			continue
		}
		store := filepath.Dir(filepath.Dir(m))
		rootfs = filepath.Join(store, meta.Root, "rootfs")
		for i := len(meta.Layers) - 1; i >= 0; i-- {
			layers = append(layers, filepath.Join(store, ".layers", meta.Layers[i], "diff"))
		}
		if _, err := os.Stat(rootfs); err == nil {
			return rootfs, layers
		}
	}
	t.Skipf("no test template under %s (make test-templates builds it)", dir)
	return "", nil
}

// coveBinary is the repository's bin/cove (make build), or skips.
func coveBinary(t *testing.T) string {
	t.Helper()
	if p := runtimetest.RunscPath(); p != "" {
		if cove := filepath.Join(filepath.Dir(p), "cove"); exists(cove) {
			return cove
		}
	}
	wd, _ := os.Getwd()
	if cove := filepath.Join(wd, "..", "..", "..", "bin", "cove"); exists(cove) {
		return cove
	}
	t.Skip("no bin/cove (make build)")
	return ""
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

// TestEnginesRunEnvd starts Cove's in-sandbox agent the way the orchestrator does (the cove
// binary bound read-only at /.cove/cove, `cove envd` as init, on the test template) and asks
// its health endpoint through Dial.
func TestEnginesRunEnvd(t *testing.T) {
	rootfs, layers := testTemplate(t)
	cove := coveBinary(t)
	eachEngine(t, func(t *testing.T, r *runtime.Runc, _ string) {
		id := newID(t)
		t0 := time.Now()
		s := create(t, r, runtime.Spec{ID: id, Rootfs: rootfs, Layers: layers, Start: true,
			Args:   []string{"/.cove/cove", "envd", "--addr", "0.0.0.0:49983"},
			Env:    []string{"COVE_SANDBOX_ID=" + id},
			Binds:  []runtime.Bind{{Source: cove, Target: "/.cove/cove", ReadOnly: true}},
			Limits: runtime.Limits{MemoryBytes: 512 << 20, PIDs: 512}})
		c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return r.Dial(ctx, id, network, "127.0.0.1:49983")
		}}}
		var status int
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			res, err := c.Get("http://envd/health")
			if err == nil {
				res.Body.Close()
				status = res.StatusCode
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("envd did not answer: %v\nstdout:\n%s\nstderr:\n%s", err, s.stdout, s.stderr)
			}
		}
		t.Logf("create to envd healthy: %s", time.Since(t0))
		if status != http.StatusNoContent {
			t.Fatalf("health: %d, want 204\nstderr:\n%s", status, s.stderr)
		}
		// A command through envd's process API: envd forks and execs it, and pipes its output.
		no := false
		stream, err := processconnect.NewProcessClient(c, "http://envd").Start(context.Background(), connect.NewRequest(&pb.StartRequest{
			Process: &pb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", "echo hello-$(id -un) && uname -r && exit 3"}}, Stdin: &no}))
		if err != nil {
			t.Fatal(err)
		}
		var out string
		code := int32(-1)
		for stream.Receive() {
			ev := stream.Msg().GetEvent()
			out += string(ev.GetData().GetStdout())
			if end := ev.GetEnd(); end != nil {
				code = end.GetExitCode()
			}
		}
		t.Logf("command through envd: exit %d, stdout %q", code, out)
		if code != 3 || !strings.HasPrefix(out, "hello-") {
			t.Fatalf("command through envd: exit %d, stdout %q, stream %v; envd stderr:\n%s", code, out, stream.Err(), s.stderr)
		}
		if err := r.CanCheckpointOn(r.Engine(id)); err != nil {
			t.Skipf("checkpoints unavailable: %v", err)
		}
		// A snapshot pause and resume: envd answers again after its restore.
		c.CloseIdleConnections()
		info, err := r.Checkpoint(context.Background(), id)
		if err != nil {
			t.Fatalf("checkpoint envd: %v", err)
		}
		t0 = time.Now()
		sb, err := r.Restore(context.Background(), id)
		if err != nil {
			t.Fatalf("restore envd: %v", err)
		}
		collect(sb.Stdout)
		collect(sb.Stderr)
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			res, err := c.Get("http://envd/health")
			if err == nil && res.StatusCode == http.StatusNoContent {
				res.Body.Close()
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("envd did not answer after its restore: %v", err)
			}
		}
		t.Logf("envd checkpoint %.1f MiB in %s; restore to healthy %s", float64(info.Bytes)/(1<<20), info.Duration.Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))
	})
}

// startEnvd runs `cove envd` as the init of a sandbox on the test template with limits, the
// way the orchestrator does, and returns its id and an HTTP client to it once it answers.
func startEnvd(t *testing.T, r *runtime.Runc, limits runtime.Limits) (*running, *http.Client) {
	t.Helper()
	rootfs, layers := testTemplate(t)
	cove := coveBinary(t)
	id := newID(t)
	s := create(t, r, runtime.Spec{ID: id, Rootfs: rootfs, Layers: layers, Start: true,
		Args:   []string{"/.cove/cove", "envd", "--addr", "0.0.0.0:49983"},
		Env:    []string{"COVE_SANDBOX_ID=" + id},
		Binds:  []runtime.Bind{{Source: cove, Target: "/.cove/cove", ReadOnly: true}},
		Limits: limits})
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return r.Dial(ctx, id, network, "127.0.0.1:49983")
	}}}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		res, err := c.Get("http://envd/health")
		if err == nil {
			res.Body.Close()
			return s, c
		}
		if time.Now().After(deadline) {
			t.Fatalf("envd did not answer: %v\nstderr:\n%s", err, s.stderr)
		}
	}
}

// runThroughEnvd runs cmd with args through envd's process API and returns its end event
// and stdout.
func runThroughEnvd(t *testing.T, c *http.Client, cmd string, args ...string) (*pb.ProcessEvent_EndEvent, string) {
	t.Helper()
	no := false
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stream, err := processconnect.NewProcessClient(c, "http://envd").Start(ctx, connect.NewRequest(&pb.StartRequest{
		Process: &pb.ProcessConfig{Cmd: cmd, Args: args}, Stdin: &no}))
	if err != nil {
		t.Fatal(err)
	}
	var out string
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		out += string(ev.GetData().GetStdout())
		if end := ev.GetEnd(); end != nil {
			return end, out
		}
	}
	t.Fatalf("%s: no end event: %v", cmd, stream.Err())
	return nil, ""
}

// TestEnginesKeepASandboxPastItsMemoryLimit: a command allocating past the sandbox's memory
// limit is SIGKILLed and its end says oom_killed, while envd and the sandbox live on: under
// runc the kernel's OOM killer chooses it, under gVisor envd does (the sentry enforces no
// limit inside, and the host cgroup has headroom above it).
func TestEnginesKeepASandboxPastItsMemoryLimit(t *testing.T) {
	eachEngine(t, func(t *testing.T, r *runtime.Runc, _ string) {
		s, c := startEnvd(t, r, runtime.Limits{MemoryBytes: 128 << 20, PIDs: 512})
		for i, alloc := range []string{
			`b = b"x" * (1 << 30); print(len(b))`,                                                     // at once, 1 GiB
			`import time; l = []` + "\n" + `while True: l.append(b"x" * (8 << 20)); time.sleep(0.01)`, // in steps
		} {
			t0 := time.Now()
			end, out := runThroughEnvd(t, c, "python3", "-c", alloc)
			t.Logf("allocation %d ended in %s: %+v, stdout %q", i, time.Since(t0).Round(time.Millisecond), end, out)
			if end.GetExited() || end.GetStatus() != "signal: killed" || !strings.HasPrefix(end.GetError(), "oom_killed: ") {
				t.Fatalf("allocation %d ended %+v, want signal: killed and an oom_killed error; envd stderr:\n%s", i, end, s.stderr)
			}
			if end, out := runThroughEnvd(t, c, "/bin/sh", "-c", "echo alive"); !end.GetExited() || out != "alive\n" {
				t.Fatalf("a command after the OOM kill: %+v %q", end, out)
			}
		}
		if st, err := r.State(context.Background(), s.id); err != nil || st != runtime.StateRunning {
			t.Fatalf("the sandbox after the OOM kills: %v %v, want running", st, err)
		}
		st, err := r.Stats(context.Background(), s.id)
		if err != nil || st.MemoryLimit != 128<<20 {
			t.Fatalf("stats %+v %v, want the 128 MiB limit", st, err)
		}
		if r.Engine(s.id) == runtime.EngineRunsc {
			// envd killed them, not the host's OOM killer behind it.
			if n := strings.Count(s.stderr.String(), `"guest oom kill"`); n != 2 || st.OOMKills != 0 {
				t.Fatalf("envd logged %d guest oom kills (want 2), the host cgroup counts %d OOM kills (want 0); envd stderr:\n%s", n, st.OOMKills, s.stderr)
			}
		}
	})
}
