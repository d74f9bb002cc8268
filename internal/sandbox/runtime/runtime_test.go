package runtime_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/internal/sandbox/runtime"
	"github.com/cove-dev/cove/internal/sandbox/runtime/runtimetest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	runtimetest.Cleanup()
	os.Exit(code)
}

func newRuntime(t *testing.T) (*runtime.Runc, string) {
	t.Helper()
	return runtimetest.Runc(t), runtimetest.BusyboxRootfs(t)
}

func newID(t *testing.T) string {
	b := make([]byte, 4)
	rand.Read(b)
	return "t-" + hex.EncodeToString(b)
}

// output collects a sandbox stream and lets a test wait for text to appear in it.
type output struct {
	mu   sync.Mutex
	buf  strings.Builder
	more chan struct{}
	done chan struct{}
}

func collect(r io.Reader) *output {
	o := &output{more: make(chan struct{}, 1), done: make(chan struct{})}
	go func() {
		defer close(o.done)
		s := bufio.NewScanner(r)
		for s.Scan() {
			o.mu.Lock()
			o.buf.WriteString(s.Text() + "\n")
			o.mu.Unlock()
			select {
			case o.more <- struct{}{}:
			default:
			}
		}
	}()
	return o
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

func (o *output) waitFor(t *testing.T, substr string, d time.Duration) {
	t.Helper()
	deadline := time.After(d)
	for !strings.Contains(o.String(), substr) {
		select {
		case <-o.more:
		case <-o.done:
			if !strings.Contains(o.String(), substr) {
				t.Fatalf("stream ended without %q; got:\n%s", substr, o.String())
			}
		case <-deadline:
			t.Fatalf("no %q within %s; got:\n%s", substr, d, o.String())
		}
	}
}

type running struct {
	id     string
	sb     *runtime.Sandbox
	stdout *output
	stderr *output
}

// create creates a sandbox and registers its destruction; start it with r.Start.
func create(t *testing.T, r *runtime.Runc, spec runtime.Spec) *running {
	t.Helper()
	if spec.ID == "" {
		spec.ID = newID(t)
	}
	sb, err := r.Create(context.Background(), spec)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() {
		if err := r.Destroy(context.Background(), spec.ID); err != nil {
			t.Errorf("destroy in cleanup: %v", err)
		}
	})
	return &running{id: spec.ID, sb: sb, stdout: collect(sb.Stdout), stderr: collect(sb.Stderr)}
}

func run(t *testing.T, r *runtime.Runc, spec runtime.Spec) *running {
	t.Helper()
	s := create(t, r, spec)
	if err := r.Start(context.Background(), s.id); err != nil {
		t.Fatalf("start: %v", err)
	}
	return s
}

func wait(t *testing.T, r *runtime.Runc, id string) runtime.Exit {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	exit, err := r.Wait(ctx, id)
	if err != nil {
		t.Fatalf("wait: %v", err)
	}
	return exit
}

func sh(script string) []string { return []string{"/bin/sh", "-c", script} }

// TestSandboxIsIsolated: what a sandbox sees of the host and may do, on each engine.
func TestSandboxIsIsolated(t *testing.T) {
	eachEngine(t, func(t *testing.T, r *runtime.Runc, rootfs string) {
		sandboxIsIsolated(t, r, rootfs, runtime.Engine(path.Base(t.Name()))) // the subtest is named by its engine
	})
}

func sandboxIsIsolated(t *testing.T, r *runtime.Runc, rootfs string, engine runtime.Engine) {
	hostMarker := filepath.Join(t.TempDir(), "host-only")
	if err := os.WriteFile(hostMarker, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	bound := filepath.Join(t.TempDir(), "cove")
	if err := os.WriteFile(bound, []byte("#!/bin/sh\necho bound-binary-ran\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	script := strings.Join([]string{
		"echo hostname=$(hostname)",
		"echo pid1=$(cat /proc/1/comm)",
		"echo procs=$(ls /proc | grep -c '^[0-9]')",
		"test -e " + hostMarker + " && echo hostfile=visible || echo hostfile=invisible",
		"echo ifaces=$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | tr '\\n' ,)",
		"echo lo=$(cat /sys/class/net/lo/operstate)",
		"grep -E '^(Seccomp|NoNewPrivs):' /proc/self/status | tr -d '\\t' | sed 's/^/status=/'",
		// Calls only the profile denies: root may read the kernel log (gVisor's) and make a
		// user namespace without any capability.
		"dmesg >/dev/null 2>/tmp/dmesg.err; echo dmesg=$(grep -c 'not permitted' /tmp/dmesg.err)",
		"unshare -U true 2>/tmp/unshare.err; echo unshare=$(grep -c 'not permitted' /tmp/unshare.err)",
		"echo uid=$(id -u)",
		"echo sys_admin_bounded=$(( (0x$(grep CapBnd /proc/self/status | cut -f2) >> 21) & 1 ))",
		"/.cove/cove",
		"echo tamper > /.cove/cove 2>/dev/null && echo bind=writable || echo bind=readonly",
		"echo written > /etc/written-in-sandbox && echo overlay=writable",
		"touch /tmp/x && echo tmp=writable",
		"echo hosts=$(grep -c $(hostname) /etc/hosts)",
		"echo done",
	}, "; ")
	s := run(t, r, runtime.Spec{
		Rootfs: rootfs,
		Args:   sh(script),
		Binds:  []runtime.Bind{{Source: bound, Target: "/.cove/cove", ReadOnly: true}},
	})
	if exit := wait(t, r, s.id); exit.Code != 0 || exit.OOMKilled {
		t.Fatalf("init exit = %+v, stderr:\n%s", exit, s.stderr)
	}
	<-s.stdout.done
	out := s.stdout.String()
	t.Logf("sandbox output:\n%s", out)

	// On runsc the sentry enforces the same profile (--oci-seccomp).
	for _, tc := range []struct{ name, want string }{
		{"seccomp filter is on", "status=Seccomp:2\n"},
		{"the profile denies syslog (dmesg)", "dmesg=1\n"},
		{"the profile denies a new user namespace (unshare)", "unshare=1\n"},
		{"hostname is the sandbox id", "hostname=" + s.id + "\n"},
		{"pid 1 is the sandbox init, not the host's", "pid1=sh\n"},
		{"host files are invisible", "hostfile=invisible\n"},
		{"the network has only loopback", "ifaces=lo,\n"},
		{"loopback is up", "lo=unknown\n"},
		{"setuid programs work (sudo), no_new_privs is off", "status=NoNewPrivs:0\n"},
		{"capabilities stay bounded: no CAP_SYS_ADMIN even through setuid", "sys_admin_bounded=0\n"},
		{"init runs as root in the sandbox", "uid=0\n"},
		{"the bound host binary runs", "bound-binary-ran\n"},
		{"a read-only bind stays read-only", "bind=readonly\n"},
		{"the root is writable", "overlay=writable\n"},
		{"/tmp is writable", "tmp=writable\n"},
		{"/etc/hosts names the sandbox", "hosts=1\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if engine == runtime.EngineRunsc && strings.HasPrefix(tc.want, "lo=") {
				t.Skip("gVisor's sysfs has no operstate; its loopback answers in TestEnginesDialReachesAListenerInTheSandboxNetnsOnly")
			}
			if !strings.Contains(out, tc.want) {
				t.Fatalf("want %q in output", tc.want)
			}
		})
	}
	t.Run("host processes are invisible", func(t *testing.T) {
		// The shell and its pipeline, where the host has hundreds.
		var n int
		for _, line := range strings.Split(out, "\n") {
			if v, ok := strings.CutPrefix(line, "procs="); ok {
				fmt.Sscan(v, &n)
			}
		}
		if n < 1 || n > 5 {
			t.Fatalf("sandbox sees %d processes, want a handful", n)
		}
	})
	t.Run("writes stay out of the template rootfs", func(t *testing.T) {
		if _, err := os.Stat(filepath.Join(rootfs, "etc/written-in-sandbox")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("template rootfs changed: stat = %v", err)
		}
		if _, err := os.Stat(filepath.Join(rootfs, ".cove")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("bind mount point leaked into the template rootfs: stat = %v", err)
		}
	})
}

func TestMemoryLimitOOMKillIsDetected(t *testing.T) {
	r, rootfs := newRuntime(t)
	// The shell keeps the command substitution's 100 MB in its own memory: over the 32 MiB limit.
	s := run(t, r, runtime.Spec{
		Rootfs: rootfs,
		Args:   sh(`x=$(head -c 100000000 /dev/zero | tr '\0' a); echo survived ${#x}`),
		Limits: runtime.Limits{MemoryBytes: 32 << 20},
	})
	exit := wait(t, r, s.id)
	if !exit.OOMKilled {
		t.Fatalf("exit = %+v, want OOMKilled; stdout:\n%s", exit, s.stdout)
	}
	if exit.Signal != "SIGKILL" {
		t.Errorf("exit signal = %q, want SIGKILL", exit.Signal)
	}
	st, err := r.Stats(context.Background(), s.id)
	if err != nil {
		t.Fatal(err)
	}
	if st.OOMKills == 0 || st.MemoryLimit != 32<<20 || st.MemoryMaxUsage < 30<<20 {
		t.Fatalf("stats = %+v, want oom kills and a peak at the 32 MiB limit", st)
	}
	if strings.Contains(s.stdout.String(), "survived") {
		t.Fatal("the allocation survived the memory limit")
	}
}

func TestPidsLimitStopsForks(t *testing.T) {
	r, rootfs := newRuntime(t)
	s := run(t, r, runtime.Spec{
		Rootfs: rootfs,
		// A shell gives up at its first failed fork: fork from a child shell, report from init.
		Args:   sh(`sh -c 'for i in $(seq 30); do sleep 30 & done'; echo forked; exec sleep 30`),
		Limits: runtime.Limits{PIDs: 8, CPUs: 0.5},
	})
	s.stdout.waitFor(t, "forked", 10*time.Second)
	t.Run("the cpu quota is half a core", func(t *testing.T) {
		b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/cpu", r.CgroupPath(s.id), "cpu.cfs_quota_us"))
		if err != nil || strings.TrimSpace(string(b)) != "50000" {
			t.Fatalf("cpu.cfs_quota_us = %q, %v; want 50000 (of a 100000 period)", b, err)
		}
	})
	st, err := r.Stats(context.Background(), s.id)
	if err != nil {
		t.Fatal(err)
	}
	if st.PIDsLimit != 8 || st.PIDs > 8 || st.PIDs < 7 {
		t.Fatalf("pids = %d of limit %d, want the limit 8 reached", st.PIDs, st.PIDsLimit)
	}
	// stderr is collected on its own goroutine: the failure may land after stdout's line.
	s.stderr.waitFor(t, "fork", 5*time.Second)
}

func TestFreezeAndThaw(t *testing.T) {
	r, rootfs := newRuntime(t)
	ctx := context.Background()
	s := run(t, r, runtime.Spec{
		Rootfs: rootfs,
		Args:   sh(`i=0; while true; do i=$((i+1)); echo tick $i; usleep 5000; done`),
	})
	s.stdout.waitFor(t, "tick 3\n", 10*time.Second)

	t0 := time.Now()
	if err := r.Freeze(ctx, s.id); err != nil {
		t.Fatal(err)
	}
	t.Logf("freeze took %s", time.Since(t0))
	if st, err := r.State(ctx, s.id); err != nil || st != runtime.StatePaused {
		t.Fatalf("state = %v, %v; want paused", st, err)
	}
	time.Sleep(50 * time.Millisecond) // let a line already in the pipe arrive
	frozen := s.stdout.String()
	time.Sleep(150 * time.Millisecond)
	if now := s.stdout.String(); now != frozen {
		t.Fatalf("a frozen sandbox kept printing: %q", strings.TrimPrefix(now, frozen))
	}

	t0 = time.Now()
	if err := r.Thaw(ctx, s.id); err != nil {
		t.Fatal(err)
	}
	t.Logf("thaw took %s", time.Since(t0))
	if st, err := r.State(ctx, s.id); err != nil || st != runtime.StateRunning {
		t.Fatalf("state = %v, %v; want running", st, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for s.stdout.String() == frozen {
		if time.Now().After(deadline) {
			t.Fatal("a thawed sandbox printed nothing more")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestDialReachesAListenerInsideTheSandbox(t *testing.T) {
	r, rootfs := newRuntime(t)
	ctx := context.Background()
	const addr = "127.0.0.1:49983"
	t0 := time.Now()
	s := run(t, r, runtime.Spec{
		Rootfs: rootfs,
		Args:   sh(`mkdir -p /www && echo "hello from $(hostname)" > /www/index.html && exec httpd -f -p ` + addr + ` -h /www`),
	})
	var body string
	for {
		c, err := r.Dial(ctx, s.id, "tcp", addr)
		if err == nil {
			fmt.Fprintf(c, "GET /index.html HTTP/1.0\r\n\r\n")
			b, _ := io.ReadAll(c)
			c.Close()
			body = string(b)
			break
		}
		if time.Since(t0) > 10*time.Second {
			t.Fatalf("dial: %v; stderr:\n%s", err, s.stderr)
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Logf("create to first HTTP response: %s", time.Since(t0))
	if !strings.Contains(body, "hello from "+s.id) {
		t.Fatalf("response = %q", body)
	}
	t.Run("the host's loopback is another network", func(t *testing.T) {
		// Nothing listens on the host's 127.0.0.1:49983 (unless the host runs envd there itself).
		var d net.Dialer
		if c, err := d.DialContext(ctx, "tcp", addr); err == nil {
			c.Close()
			t.Skip("something on the host listens on " + addr)
		}
	})
	t.Run("a name that needs a lookup is refused", func(t *testing.T) {
		if _, err := r.Dial(ctx, s.id, "tcp", "example.invalid:80"); !errors.Is(err, runtime.ErrInvalid) {
			t.Fatalf("err = %v, want ErrInvalid", err)
		}
	})
	t.Run("an unknown sandbox is not found", func(t *testing.T) {
		if _, err := r.Dial(ctx, "no-such-sandbox", "tcp", addr); !errors.Is(err, runtime.ErrNotFound) {
			t.Fatalf("err = %v, want ErrNotFound", err)
		}
	})
}

// leaks lists what of a sandbox is still on the host.
func leaks(t *testing.T, r *runtime.Runc, id string, pid int) []string {
	t.Helper()
	var left []string
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(mi), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && (strings.Contains(f[4], "/"+id+"/") || strings.HasSuffix(f[4], "/"+id)) {
			left = append(left, "mount: "+line)
		}
	}
	dirs, _ := filepath.Glob("/sys/fs/cgroup/*" + r.CgroupPath(id))
	for _, d := range dirs {
		left = append(left, "cgroup: "+d)
	}
	if _, err := os.Stat(r.NetnsPath(id)); err == nil {
		left = append(left, "netns: "+r.NetnsPath(id))
	}
	if pid > 0 {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
			stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			left = append(left, "process: "+string(stat))
		}
	}
	return left
}

func TestDestroyLeavesNothingBehind(t *testing.T) {
	r, rootfs := newRuntime(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		args  []string
		setup func(t *testing.T, s *running)
	}{
		{"a running sandbox", sh("sleep 300"), func(t *testing.T, s *running) {
			if err := r.Start(ctx, s.id); err != nil {
				t.Fatal(err)
			}
		}},
		{"a frozen sandbox", sh("sleep 300 & sleep 300"), func(t *testing.T, s *running) {
			if err := r.Start(ctx, s.id); err != nil {
				t.Fatal(err)
			}
			// Under a loaded CI a task of a sandbox just started once stayed unfrozen for
			// the whole patience (10 s): that freeze thaws back, and a second one is tried.
			if err := r.Freeze(ctx, s.id); err != nil {
				t.Logf("freeze: %v; trying again", err)
				if err := r.Freeze(ctx, s.id); err != nil {
					t.Fatal(err)
				}
			}
		}},
		{"a created sandbox never started", sh("sleep 300"), func(t *testing.T, s *running) {}},
		{"a sandbox whose init exited", sh("true"), func(t *testing.T, s *running) {
			if err := r.Start(ctx, s.id); err != nil {
				t.Fatal(err)
			}
			if exit := wait(t, r, s.id); exit.Code != 0 {
				t.Fatalf("exit = %+v", exit)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := create(t, r, runtime.Spec{Rootfs: rootfs, Args: tc.args, Limits: runtime.Limits{MemoryBytes: 64 << 20, CPUs: 0.5, PIDs: 32}})
			tc.setup(t, s)
			if l := leaks(t, r, s.id, 0); len(l) == 0 {
				t.Fatal("found no mounts, cgroups or netns while the sandbox exists: the leak check is blind")
			}
			t0 := time.Now()
			if err := r.Destroy(ctx, s.id); err != nil {
				t.Fatal(err)
			}
			t.Logf("destroy took %s", time.Since(t0))
			if l := leaks(t, r, s.id, s.sb.Pid); len(l) > 0 {
				t.Fatalf("left behind:\n%s", strings.Join(l, "\n"))
			}
			select {
			case <-s.stdout.done:
			case <-time.After(5 * time.Second):
				t.Fatal("stdout did not end after destroy")
			}
			if err := r.Destroy(ctx, s.id); err != nil {
				t.Fatalf("second destroy: %v", err)
			}
			if _, err := r.Stats(ctx, s.id); !errors.Is(err, runtime.ErrNotFound) {
				t.Fatalf("stats after destroy: err = %v, want ErrNotFound", err)
			}
		})
	}
}

func TestCreateRefusesBadSpecs(t *testing.T) {
	r, rootfs := newRuntime(t)
	ctx := context.Background()
	existing := create(t, r, runtime.Spec{Rootfs: rootfs, Args: sh("sleep 300")})
	for _, tc := range []struct {
		name string
		spec runtime.Spec
		want error
	}{
		{"an id with a slash", runtime.Spec{ID: "a/b", Rootfs: rootfs, Args: sh("true")}, runtime.ErrInvalid},
		{"an empty command", runtime.Spec{ID: newID(t), Rootfs: rootfs}, runtime.ErrInvalid},
		{"a missing rootfs", runtime.Spec{ID: newID(t), Rootfs: "/nonexistent", Args: sh("true")}, runtime.ErrInvalid},
		{"a relative bind", runtime.Spec{ID: newID(t), Rootfs: rootfs, Args: sh("true"), Binds: []runtime.Bind{{Source: "x", Target: "/x"}}}, runtime.ErrInvalid},
		{"an id in use", runtime.Spec{ID: existing.id, Rootfs: rootfs, Args: sh("true")}, runtime.ErrExists},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := r.Create(ctx, tc.spec); !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
	t.Run("a command that does not exist fails create and cleans up", func(t *testing.T) {
		id := newID(t)
		_, err := r.Create(ctx, runtime.Spec{ID: id, Rootfs: rootfs, Args: []string{"/no/such/binary"}})
		if err == nil {
			t.Fatal("create succeeded")
		}
		t.Logf("error: %v", err)
		if l := leaks(t, r, id, 0); len(l) > 0 {
			t.Fatalf("left behind:\n%s", strings.Join(l, "\n"))
		}
	})
}

func TestTimings(t *testing.T) {
	r, rootfs := newRuntime(t)
	ctx := context.Background()
	const n = 5
	var create, start, ready, freeze, thaw, destroy, runTrue time.Duration
	for i := 0; i < n; i++ {
		id := newID(t)
		t0 := time.Now()
		sb, err := r.Create(ctx, runtime.Spec{ID: id, Rootfs: rootfs, Args: sh("echo ready; exec sleep 300")})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Destroy(ctx, id) })
		create += time.Since(t0)
		t1 := time.Now()
		if err := r.Start(ctx, id); err != nil {
			t.Fatal(err)
		}
		start += time.Since(t1)
		line, err := bufio.NewReader(sb.Stdout).ReadString('\n')
		if err != nil || line != "ready\n" {
			t.Fatalf("first line = %q, %v", line, err)
		}
		ready += time.Since(t0)
		t2 := time.Now()
		if err := r.Freeze(ctx, id); err != nil {
			t.Fatal(err)
		}
		freeze += time.Since(t2)
		t3 := time.Now()
		if err := r.Thaw(ctx, id); err != nil {
			t.Fatal(err)
		}
		thaw += time.Since(t3)
		t4 := time.Now()
		if err := r.Destroy(ctx, id); err != nil {
			t.Fatal(err)
		}
		destroy += time.Since(t4)
		sb.Stdout.Close()
		sb.Stderr.Close()

		id = newID(t)
		t5 := time.Now()
		sb, err = r.Create(ctx, runtime.Spec{ID: id, Rootfs: rootfs, Args: []string{"/bin/true"}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Destroy(ctx, id) })
		if err := r.Start(ctx, id); err != nil {
			t.Fatal(err)
		}
		wait(t, r, id)
		runTrue += time.Since(t5)
		r.Destroy(ctx, id)
		sb.Stdout.Close()
		sb.Stderr.Close()
	}
	t.Logf("means over %d: create %s, start %s, create->first output %s, run `true` to exit %s, freeze %s, thaw %s, destroy %s",
		n, create/n, start/n, ready/n, runTrue/n, freeze/n, thaw/n, destroy/n)
}

func TestDetectExplainsWhatIsMissing(t *testing.T) {
	h := runtime.Detect(context.Background(), "/nonexistent/runc")
	err := h.Err()
	if err == nil || !strings.Contains(err.Error(), "runc not found") {
		t.Fatalf("Err() = %v, want it to name the missing runc", err)
	}
	t.Logf("host: root=%v runc=%q %q seccomp=%v cgroup v1=%v overlay=%v", h.Root, h.Runc, h.RuncVersion, h.Seccomp, h.CgroupV1, h.Overlay)
}

func TestTemplateSymlinksCannotReachTheHost(t *testing.T) {
	r, rootfs := newRuntime(t)
	evil := filepath.Join(t.TempDir(), "rootfs")
	if out, err := exec.Command("cp", "-a", rootfs, evil).CombinedOutput(); err != nil {
		t.Fatalf("copy rootfs: %v: %s", err, out)
	}
	hostDir := t.TempDir()
	os.Chmod(hostDir, 0o700)
	hostFile := filepath.Join(t.TempDir(), "hosts")
	os.WriteFile(hostFile, []byte("host content\n"), 0o644)
	os.RemoveAll(filepath.Join(evil, "tmp"))
	if err := os.Symlink(hostDir, filepath.Join(evil, "tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(hostFile, filepath.Join(evil, "etc/hosts")); err != nil {
		t.Fatal(err)
	}
	s := run(t, r, runtime.Spec{Rootfs: evil, Args: sh("touch /tmp/x && echo tmp=dir; cat /etc/hosts")})
	wait(t, r, s.id)
	<-s.stdout.done
	if fi, _ := os.Stat(hostDir); fi.Mode().Perm() != 0o700 {
		t.Errorf("host dir mode changed to %v", fi.Mode())
	}
	if b, _ := os.ReadFile(hostFile); string(b) != "host content\n" {
		t.Errorf("host file changed to %q", b)
	}
	if out := s.stdout.String(); !strings.Contains(out, "tmp=dir") || !strings.Contains(out, "localhost "+s.id) {
		t.Errorf("sandbox output = %q", out)
	}
}

func TestOOMEventsReportAKilledChildWhileInitLives(t *testing.T) {
	r, rootfs := newRuntime(t)
	// Init survives; the child's allocation is OOM-killed. The child raises its own OOM
	// score first, as envd does for every command it starts: memory charged to the cgroup
	// but held in no process's RSS (pipe buffers, page cache) otherwise leaves init and the
	// child with near-equal scores, and under load the kernel picked init.
	s := create(t, r, runtime.Spec{
		Rootfs: rootfs,
		Args:   sh(`sh -c 'echo 1000 > /proc/self/oom_score_adj; x=$(head -c 100000000 /dev/zero | tr "\0" a); echo survived'; echo child-done; sleep 30`),
		Limits: runtime.Limits{MemoryBytes: 32 << 20},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	events, err := r.OOMEvents(ctx, s.id)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx, s.id); err != nil {
		t.Fatal(err)
	}
	select {
	case n, ok := <-events:
		if !ok || n == 0 {
			t.Fatalf("oom event: count %d open %v, want a count of at least 1", n, ok)
		}
	case <-ctx.Done():
		t.Fatal("no OOM event within 20 s")
	}
	s.stdout.waitFor(t, "child-done", 10*time.Second)
	if st, err := r.State(ctx, s.id); err != nil || st != runtime.StateRunning {
		t.Fatalf("init after the child's OOM kill: state %v err %v, want running", st, err)
	}
	if strings.Contains(s.stdout.String(), "survived") {
		t.Fatal("the allocation survived the memory limit")
	}
}

func TestTheSandboxInitIsTheOOMKillersLastChoiceWhereTheHostAllowsIt(t *testing.T) {
	r, rootfs := newRuntime(t)
	s := run(t, r, runtime.Spec{Rootfs: rootfs, Args: sh(`echo adj=$(cat /proc/1/oom_score_adj); sleep 30`)})
	s.stdout.waitFor(t, "adj=", 10*time.Second)
	out := s.stdout.String()
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil || data[0].Effective&(1<<unix.CAP_SYS_RESOURCE) == 0 {
		if !strings.Contains(out, "adj=0") {
			t.Errorf("without CAP_SYS_RESOURCE init's score should stay 0: %q", out)
		}
		t.Skip("this host lacks CAP_SYS_RESOURCE: no score can go below 0 (init stays at 0, envd raises its commands)")
	}
	if !strings.Contains(out, "adj=-998") {
		t.Errorf("init's oom_score_adj: %q, want -998", out)
	}
}

func TestProcessesListTheSandboxTreeWithSandboxPidsAndMemory(t *testing.T) {
	eachEngine(t, func(t *testing.T, r *runtime.Runc, rootfs string) {
		s := run(t, r, runtime.Spec{Rootfs: rootfs, Args: sh(`sleep 30 & x=$(head -c 5000000 /dev/zero | tr "\0" a); echo ready; while :; do sleep 1; done`)})
		// (a loop, not a final sleep: the shell would exec its last command and lose the string)
		s.stdout.waitFor(t, "ready", 10*time.Second)
		t0 := time.Now()
		procs, err := r.Processes(context.Background(), s.id)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%d processes listed in %s", len(procs), time.Since(t0))
		var init, sleeper bool
		for _, p := range procs {
			if p.PID == 1 && p.PPID == 0 && strings.HasPrefix(p.Command, "/bin/sh") {
				init = true
				if p.RSSBytes < 5_000_000 {
					t.Errorf("init holds the 5 MB string but RSS is %d", p.RSSBytes)
				}
			}
			if strings.HasPrefix(p.Command, "sleep 30") && p.PPID == 1 && p.HostPID != p.PID {
				sleeper = true
			}
		}
		if !init || !sleeper {
			t.Fatalf("processes %+v: want init (pid 1) and its sleeping child with sandbox pids", procs)
		}
		if procs[0].PID != 1 {
			t.Errorf("biggest memory first: %+v", procs)
		}
	})
}

func TestCreateCanStartTheSandboxInOneStep(t *testing.T) {
	r, rootfs := newRuntime(t)
	s := create(t, r, runtime.Spec{Rootfs: rootfs, Args: sh(`echo started-at-once; sleep 30`), Start: true})
	s.stdout.waitFor(t, "started-at-once", 10*time.Second)
	if st, err := r.State(context.Background(), s.id); err != nil || st != runtime.StateRunning {
		t.Fatalf("state %v %v, want running without a Start call", st, err)
	}
}

func TestADiskLimitedSandboxGetsENOSPCAndTheHostGivesNoMore(t *testing.T) {
	eachEngine(t, func(t *testing.T, r *runtime.Runc, rootfs string) {
		const limit = 32 << 20
		s := run(t, r, runtime.Spec{Rootfs: rootfs, Limits: runtime.Limits{DiskBytes: limit},
			Args: sh(`dd if=/dev/zero of=/big bs=1M count=64 2>&1; echo dd-exit=$?; echo small > /small && echo small-ok; sleep 30`)})
		s.stdout.waitFor(t, "dd-exit=", 20*time.Second)
		upper := r.UpperDir(s.id)
		img := filepath.Join(filepath.Dir(filepath.Dir(upper)), "disk.img")
		t.Run("a write past the disk size gets ENOSPC inside the sandbox", func(t *testing.T) {
			out := s.stdout.String()
			if !strings.Contains(out, "No space left on device") || strings.Contains(out, "dd-exit=0") {
				t.Errorf("dd of 64 MiB into a 32 MiB disk: %q", out)
			}
		})
		t.Run("the sandbox's writes live on its own disk, whose host file holds at most its size", func(t *testing.T) {
			if !strings.HasSuffix(upper, "/disk/upper") {
				t.Errorf("upper dir %s is not on the sandbox's disk", upper)
			}
			var st unix.Stat_t
			if err := unix.Stat(img, &st); err != nil {
				t.Fatal(err)
			}
			if used := st.Blocks * 512; used > limit {
				t.Errorf("the disk image uses %d bytes of the host's disk, over the %d limit", used, limit)
			}
		})
		t.Run("destroy unmounts the disk and frees its loop device", func(t *testing.T) {
			if err := r.Destroy(context.Background(), s.id); err != nil {
				t.Fatal(err)
			}
			mounts, _ := os.ReadFile("/proc/self/mountinfo")
			if strings.Contains(string(mounts), filepath.Dir(upper)) {
				t.Errorf("the disk is still mounted at %s", filepath.Dir(upper))
			}
			files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
			for _, f := range files {
				if b, _ := os.ReadFile(f); strings.HasPrefix(string(b), img) {
					t.Errorf("%s still backs onto %s", f, img)
				}
			}
		})
	})
}

// BenchmarkCreate times a sandbox's create (its destroy untimed) without and with a 1 GiB
// disk limit, in one run: the difference is what the limit costs create (go test -run '^$'
// -bench 'Create$' ./internal/sandbox/runtime/).
func BenchmarkCreate(b *testing.B) {
	r := runtimetest.Runc(b)
	rootfs := runtimetest.BusyboxRootfs(b)
	for _, disk := range []int64{0, 1 << 30} {
		name := "no disk limit"
		if disk > 0 {
			name = "1 GiB disk"
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				id := fmt.Sprintf("bench-%d-%d", disk>>20, b.N+int(time.Now().UnixNano()%1e9))
				if _, err := r.Create(context.Background(), runtime.Spec{ID: id, Rootfs: rootfs, Args: sh("true"),
					Limits: runtime.Limits{DiskBytes: disk}}); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := r.Destroy(context.Background(), id); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}

// adoptPair returns two drivers on the same data, runc state and netns dirs: the second
// stands for a server started after the first one died.
func adoptPair(t *testing.T) (first, second *runtime.Runc, rootfs string) {
	t.Helper()
	runtimetest.Runc(t) // skips when the machine cannot run sandboxes
	cfg := runtime.Config{DataDir: t.TempDir(), RuncRoot: t.TempDir(), NetnsDir: t.TempDir()}
	var err error
	if first, err = runtime.NewRunc(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	if second, err = runtime.NewRunc(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	return first, second, runtimetest.BusyboxRootfs(t)
}

func TestAdopt(t *testing.T) {
	t.Run("a new driver takes over a running sandbox and reads what it wrote while nobody read", func(t *testing.T) {
		r1, r2, rootfs := adoptPair(t)
		s := create(t, r1, runtime.Spec{Rootfs: rootfs, Start: true, Args: sh(
			// The init holds read ends of its own stdio, as envd does, so they outlive their reader.
			`exec 3</proc/self/fd/1 4</proc/self/fd/2; echo ready; while [ ! -e /go ]; do sleep 0.02; done; echo while-away; touch /written; sleep 300`)})
		s.stdout.waitFor(t, "ready", 10*time.Second)
		s.sb.Stdout.Close() // the first server dies: nobody reads
		s.sb.Stderr.Close()
		<-s.stdout.done
		merged := filepath.Join(filepath.Dir(r1.UpperDir(s.id)), "rootfs")
		if err := os.WriteFile(filepath.Join(merged, "go"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if _, err := os.Stat(filepath.Join(merged, "written")); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the sandbox did not write while nobody read its stdout (a write that blocks or fails?)")
			}
		}
		sb, state, err := r2.Adopt(context.Background(), s.id)
		if err != nil {
			t.Fatalf("adopt: %v", err)
		}
		t.Cleanup(func() { _ = r2.Destroy(context.Background(), s.id) })
		if state != runtime.StateRunning || sb.Pid != s.sb.Pid {
			t.Fatalf("adopted state %s pid %d, want running with pid %d", state, sb.Pid, s.sb.Pid)
		}
		out := collect(sb.Stdout)
		collect(sb.Stderr)
		out.waitFor(t, "while-away", 10*time.Second)
		if err := r2.Freeze(context.Background(), s.id); err != nil {
			t.Fatalf("freeze after adopt: %v", err)
		}
		if _, st, err := r2.Adopt(context.Background(), s.id); !errors.Is(err, runtime.ErrExists) {
			t.Fatalf("adopting twice: %v %v, want ErrExists", st, err)
		}
		if err := r2.Thaw(context.Background(), s.id); err != nil {
			t.Fatalf("thaw after adopt: %v", err)
		}
		if err := r2.Destroy(context.Background(), s.id); err != nil {
			t.Fatalf("destroy after adopt: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := r2.Wait(ctx, s.id); err != nil && !errors.Is(err, runtime.ErrNotFound) {
			t.Fatalf("wait after destroy: %v", err)
		}
		<-out.done // the FIFO ends once the sandbox's processes are gone
	})
	t.Run("the new driver sees the exit of an adopted init", func(t *testing.T) {
		r1, r2, rootfs := adoptPair(t)
		s := create(t, r1, runtime.Spec{Rootfs: rootfs, Start: true, Args: sh(`echo ready; sleep 300`)})
		s.stdout.waitFor(t, "ready", 10*time.Second)
		if _, _, err := r2.Adopt(context.Background(), s.id); err != nil {
			t.Fatalf("adopt: %v", err)
		}
		t.Cleanup(func() { _ = r2.Destroy(context.Background(), s.id) })
		if err := syscall.Kill(s.sb.Pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		ex, err := r2.Wait(ctx, s.id)
		if err != nil {
			t.Fatalf("wait on the adopted init: %v", err)
		}
		if ex.At.IsZero() {
			t.Errorf("exit %+v has no time", ex)
		}
	})
	t.Run("a sandbox whose init died while nobody watched is not found", func(t *testing.T) {
		r1, r2, rootfs := adoptPair(t)
		s := create(t, r1, runtime.Spec{Rootfs: rootfs, Start: true, Args: sh(`echo ready; sleep 300`)})
		s.stdout.waitFor(t, "ready", 10*time.Second)
		if err := syscall.Kill(s.sb.Pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		wait(t, r1, s.id)
		if _, _, err := r2.Adopt(context.Background(), s.id); !errors.Is(err, runtime.ErrNotFound) {
			t.Fatalf("adopt a dead sandbox: %v, want ErrNotFound", err)
		}
	})
}

// memoryHolder is a script whose dd holds mb MB read from source in its memory (blocked
// writing into a pipe nobody reads); it prints ready once they are in, and answer on SIGUSR1.
func memoryHolder(source string, mb int64) string {
	// Ready once dd has read its whole block (its rchar, bytes returned by read(2)): dd then
	// blocks writing to sleep, which never reads. Its RSS is no sign: dd's own text counts
	// there, so RSS reached the size with a megabyte of the block still unread (a CI run
	// checkpointed 15.9 MiB for "16 MB of /dev/urandom").
	return fmt.Sprintf(`dd if=%s bs=%dM count=2 iflag=fullblock 2>/dev/null | sleep 100000 &
		while :; do b=$(awk '/^rchar/{print $2}' /proc/$(pidof dd)/io 2>/dev/null); [ "${b:-0}" -ge %d ] && break; sleep 0.05; done
		echo ready; trap 'echo answer' USR1; while :; do sleep 0.05; done`, source, mb, mb<<20)
}

// restoreAndAsk restores checkpointed sandbox id and sends its init SIGUSR1, which the
// checkpoint tests' scripts answer on stdout; it returns that stdout.
func restoreAndAsk(t *testing.T, r *runtime.Runc, id string) *output {
	t.Helper()
	sb, err := r.Restore(context.Background(), id)
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	out := collect(sb.Stdout)
	collect(sb.Stderr)
	if err := syscall.Kill(sb.Pid, syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestCheckpointAndRestore(t *testing.T) {
	r, rootfs := newRuntime(t)
	if err := r.CanCheckpoint(); err != nil {
		t.Skipf("checkpoints unavailable: %v", err)
	}
	t.Run("a restored sandbox has the same processes and memory, and its output reaches the new pipes", func(t *testing.T) {
		s := create(t, r, runtime.Spec{Rootfs: rootfs, Start: true, Args: sh(
			`v=$(cat /proc/sys/kernel/random/uuid); echo value-$v; trap 'echo answer-$v' USR1; while :; do sleep 0.05; done`)})
		s.stdout.waitFor(t, "value-", 10*time.Second)
		value := strings.TrimSpace(strings.TrimPrefix(s.stdout.String(), "value-"))
		info, err := r.Checkpoint(context.Background(), s.id)
		if err != nil {
			t.Fatalf("checkpoint: %v", err)
		}
		if info.Bytes <= 0 {
			t.Errorf("checkpoint info %+v: no bytes on disk", info)
		}
		if ex := wait(t, r, s.id); !ex.Checkpointed {
			t.Errorf("exit after the checkpoint %+v: want Checkpointed", ex)
		}
		if _, err := r.Stats(context.Background(), s.id); err == nil {
			t.Errorf("the checkpointed sandbox still has cgroups with stats: its memory is not freed")
		}
		restoreAndAsk(t, r, s.id).waitFor(t, "answer-"+value, 10*time.Second)
		if _, err := r.Restore(context.Background(), s.id); !errors.Is(err, runtime.ErrExists) {
			t.Errorf("restoring a running sandbox: %v, want ErrExists", err)
		}
	})
	t.Run("an exported checkpoint starts independent copies with the same memory and files, each named by its own id", func(t *testing.T) {
		s := create(t, r, runtime.Spec{Rootfs: rootfs, Start: true, Args: sh(
			`v=$(cat /proc/sys/kernel/random/uuid); echo $v > /file; echo value-$v; trap 'echo answer-$v-$(cat /file)-$(hostname)' USR1; while :; do sleep 0.05; done`)})
		s.stdout.waitFor(t, "value-", 10*time.Second)
		value := strings.TrimSpace(strings.TrimPrefix(s.stdout.String(), "value-"))
		if _, err := r.Checkpoint(context.Background(), s.id); err != nil {
			t.Fatalf("checkpoint: %v", err)
		}
		export := filepath.Join(t.TempDir(), "export")
		if n, err := r.Export(context.Background(), s.id, export); err != nil || n <= 0 {
			t.Fatalf("export: %d bytes, %v", n, err)
		}
		if _, err := r.Restore(context.Background(), s.id); err != nil {
			t.Fatalf("restore the parent: %v", err)
		}
		child := create(t, r, runtime.Spec{Rootfs: rootfs, Args: sh("true"), Restore: export})
		if err := syscall.Kill(child.sb.Pid, syscall.SIGUSR1); err != nil {
			t.Fatal(err)
		}
		child.stdout.waitFor(t, "answer-"+value+"-"+value+"-"+child.id, 10*time.Second)
	})
	t.Run("touched zero pages take no disk and random ones do, and the sandbox restores", func(t *testing.T) {
		for _, c := range []struct {
			source   string
			mb       int64
			wantDisk func(bytes, mb int64) bool
		}{
			{"/dev/zero", 64, func(bytes, mb int64) bool { return bytes < 8<<20 }},
			{"/dev/urandom", 16, func(bytes, mb int64) bool { return bytes >= mb<<20 }},
		} {
			s := create(t, r, runtime.Spec{Rootfs: rootfs, Start: true, Args: sh(memoryHolder(c.source, c.mb))})
			s.stdout.waitFor(t, "ready", 30*time.Second)
			info, err := r.Checkpoint(context.Background(), s.id)
			if err != nil {
				t.Fatalf("checkpoint: %v", err)
			}
			t.Logf("%d MB of %s touched: %.1f MiB on disk, %.1f MiB of zero pages as holes", c.mb, c.source, float64(info.Bytes)/(1<<20), float64(info.ZeroBytes)/(1<<20))
			if info.Bytes+info.ZeroBytes < c.mb<<20 || !c.wantDisk(info.Bytes, c.mb) {
				t.Errorf("%d MB of %s touched: checkpoint %+v", c.mb, c.source, info)
			}
			restoreAndAsk(t, r, s.id).waitFor(t, "answer", 10*time.Second)
		}
	})
	t.Run("an export that does not fit is ErrNoSpace and leaves nothing", func(t *testing.T) {
		s := create(t, r, runtime.Spec{Rootfs: rootfs, Start: true, Args: sh(memoryHolder("/dev/urandom", 8))})
		s.stdout.waitFor(t, "ready", 10*time.Second)
		if _, err := r.Checkpoint(context.Background(), s.id); err != nil {
			t.Fatalf("checkpoint: %v", err)
		}
		small := t.TempDir()
		if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", small).CombinedOutput(); err != nil {
			t.Skipf("mount a small tmpfs: %v: %s", err, out)
		}
		t.Cleanup(func() { _ = unix.Unmount(small, unix.MNT_DETACH) })
		export := filepath.Join(small, "export")
		if _, err := r.Export(context.Background(), s.id, export); !errors.Is(err, runtime.ErrNoSpace) {
			t.Errorf("export to a full disk: %v, want ErrNoSpace", err)
		}
		if _, err := os.Stat(export); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the failed export left %s: %v", export, err)
		}
		if _, err := r.Restore(context.Background(), s.id); err != nil {
			t.Errorf("restore after the failed export: %v", err)
		}
	})
	t.Run("a checkpoint whose tmpfs images an older CRIU gzipped restores, /dev/shm and all", func(t *testing.T) {
		s := create(t, r, runtime.Spec{Rootfs: rootfs, Start: true, Args: sh(
			`echo kept > /dev/shm/f; echo ready; trap 'echo answer-$(cat /dev/shm/f)' USR1; while :; do sleep 0.05; done`)})
		s.stdout.waitFor(t, "ready", 10*time.Second)
		if _, err := r.Checkpoint(context.Background(), s.id); err != nil {
			t.Fatalf("checkpoint: %v", err)
		}
		// The runtime's data dir is one of the parent test's temp dirs (runtimetest.Runc).
		imgs, _ := filepath.Glob(filepath.Join(os.TempDir(), "TestCheckpointAndRestore*", "*", s.id, "checkpoint", "tmpfs-dev-*.img"))
		if len(imgs) == 0 {
			t.Fatal("no tmpfs images in the checkpoint")
		}
		tars := 0
		for _, img := range imgs {
			plain, err := os.ReadFile(img)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.HasPrefix(plain, []byte("cove-empty-tmpfs ")) {
				continue // an empty tmpfs: no archive, from any CRIU (scripts/criu/0007)
			}
			tars++
			if len(plain) > 1 && plain[0] == 0x1f && plain[1] == 0x8b {
				t.Fatalf("%s is gzipped already: CRIU writes plain tar (scripts/criu/0004)", img)
			}
			var buf bytes.Buffer
			zw := gzip.NewWriter(&buf)
			_, _ = zw.Write(plain)
			_ = zw.Close()
			if err := os.WriteFile(img, buf.Bytes(), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if tars < 2 { // /dev and /dev/shm hold files
			t.Fatalf("%d of the tmpfs images %v are archives, want /dev's and /dev/shm's", tars, imgs)
		}
		restoreAndAsk(t, r, s.id).waitFor(t, "answer-kept", 10*time.Second)
	})
	t.Run("an empty tmpfs is saved as a marker, and restored with its mode and times", func(t *testing.T) {
		s := create(t, r, runtime.Spec{Rootfs: rootfs, Start: true, Args: sh(
			`chmod 0710 /dev/shm; touch -d @981173106 /dev/shm; echo ready; trap 'echo answer-$(stat -c %a-%Y /dev/shm)-$(ls -A /dev/shm | wc -l)' USR1; while :; do sleep 0.05; done`)})
		s.stdout.waitFor(t, "ready", 10*time.Second)
		if _, err := r.Checkpoint(context.Background(), s.id); err != nil {
			t.Fatalf("checkpoint: %v", err)
		}
		imgs, _ := filepath.Glob(filepath.Join(os.TempDir(), "TestCheckpointAndRestore*", "*", s.id, "checkpoint", "tmpfs-dev-*.img"))
		var markers []string
		for _, img := range imgs {
			b, err := os.ReadFile(img)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.HasPrefix(b, []byte("cove-empty-tmpfs v1 ")) {
				markers = append(markers, strings.TrimSpace(string(b)))
			}
		}
		// /proc/acpi and /sys/firmware (runc's masked paths) and the emptied /dev/shm.
		if len(markers) < 3 || !slices.ContainsFunc(markers, func(m string) bool { return strings.Contains(m, " mode=710 ") }) {
			t.Fatalf("empty tmpfs markers %q: want three, one with mode=710", markers)
		}
		restoreAndAsk(t, r, s.id).waitFor(t, "answer-710-981173106-0", 10*time.Second)
	})
	t.Run("restoring a sandbox without a checkpoint says so", func(t *testing.T) {
		if _, err := r.Restore(context.Background(), newID(t)); !errors.Is(err, runtime.ErrNoCheckpoint) {
			t.Errorf("restore without a checkpoint: %v, want ErrNoCheckpoint", err)
		}
	})
}
