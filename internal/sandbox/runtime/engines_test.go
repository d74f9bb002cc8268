package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/internal/sandbox/runtime"
	"github.com/cove-dev/cove/internal/sandbox/runtime/runtimetest"
)

// This file runs the runtime's behaviours on each engine (runc, and gVisor's runsc where
// bin/runsc is built): the same methods, the same answers.

var engines = []runtime.Engine{runtime.EngineRunc, runtime.EngineRunsc}

// eachEngine runs f as a subtest per engine, on a driver whose default engine it is; a
// subtest for an engine this host lacks skips, saying why.
func eachEngine(t *testing.T, f func(t *testing.T, r *runtime.Runc, rootfs string)) {
	for _, e := range engines {
		t.Run(string(e), func(t *testing.T) {
			r := runtimetest.RuncWith(t, runtime.Config{DefaultEngine: e, RunscPath: runtimetest.RunscPath()})
			runtimetest.Engine(t, r, e)
			f(t, r, runtimetest.BusyboxRootfs(t))
		})
	}
}

func TestEnginesRunInitToItsExitCode(t *testing.T) {
	eachEngine(t, func(t *testing.T, r *runtime.Runc, rootfs string) {
		for _, start := range []bool{false, true} {
			s := create(t, r, runtime.Spec{Rootfs: rootfs, Start: start, Args: sh(`echo out-$(hostname); echo err >&2; exit 7`)})
			if !start {
				if err := r.Start(context.Background(), s.id); err != nil {
					t.Fatal(err)
				}
			}
			exit := wait(t, r, s.id)
			<-s.stdout.done
			<-s.stderr.done
			if exit.Code != 7 || exit.OOMKilled || exit.Signal != "" {
				t.Errorf("start in create %v: exit = %+v, want code 7", start, exit)
			}
			if got := s.stdout.String(); got != "out-"+s.id+"\n" {
				t.Errorf("stdout = %q", got)
			}
			if got := s.stderr.String(); got != "err\n" {
				t.Errorf("stderr = %q", got)
			}
			if e := r.Engine(s.id); e != runtime.Engine(t.Name()[strings.LastIndex(t.Name(), "/")+1:]) {
				t.Errorf("engine of %s = %s", s.id, e)
			}
		}
	})
}

func TestEnginesDialReachesAListenerInTheSandboxNetnsOnly(t *testing.T) {
	eachEngine(t, func(t *testing.T, r *runtime.Runc, rootfs string) {
		ctx := context.Background()
		addr := fmt.Sprintf("127.0.0.1:%d", 40000+mrand.IntN(9000))
		s := run(t, r, runtime.Spec{
			Rootfs: rootfs,
			Args:   sh(`mkdir -p /www && echo "hello from $(hostname)" > /www/index.html && exec httpd -f -p ` + addr + ` -h /www`),
		})
		body, err := httpGet(ctx, r, s.id, addr, 10*time.Second)
		if err != nil {
			t.Fatalf("%v; stderr:\n%s", err, s.stderr)
		}
		if !strings.Contains(body, "hello from "+s.id) {
			t.Fatalf("response = %q", body)
		}
		var d net.Dialer
		if c, err := d.DialContext(ctx, "tcp", addr); err == nil {
			c.Close()
			t.Fatalf("the sandbox's listener on %s is reachable on the host's loopback: it is not in its own network namespace", addr)
		}
	})
}

// httpGet dials addr in sandbox id until it answers (or patience runs out) and returns what
// a GET / answers.
func httpGet(ctx context.Context, r *runtime.Runc, id, addr string, patience time.Duration) (string, error) {
	deadline := time.Now().Add(patience)
	for {
		c, err := r.Dial(ctx, id, "tcp", addr)
		if err == nil {
			fmt.Fprintf(c, "GET /index.html HTTP/1.0\r\n\r\n")
			b, _ := io.ReadAll(c)
			c.Close()
			return string(b), nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("dial %s: %w", addr, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestEnginesFreezeAndThaw(t *testing.T) {
	eachEngine(t, func(t *testing.T, r *runtime.Runc, rootfs string) {
		ctx := context.Background()
		s := run(t, r, runtime.Spec{Rootfs: rootfs, Args: sh(`i=0; while true; do i=$((i+1)); echo tick $i; usleep 5000; done`)})
		s.stdout.waitFor(t, "tick 3\n", 10*time.Second)
		t0 := time.Now()
		if err := r.Freeze(ctx, s.id); err != nil {
			t.Fatal(err)
		}
		t.Logf("freeze took %s", time.Since(t0))
		if st, err := r.State(ctx, s.id); err != nil || st != runtime.StatePaused {
			t.Fatalf("state = %v, %v; want paused", st, err)
		}
		time.Sleep(50 * time.Millisecond)
		frozen := s.stdout.String()
		time.Sleep(200 * time.Millisecond)
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
		for deadline := time.Now().Add(5 * time.Second); s.stdout.String() == frozen; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("a thawed sandbox printed nothing more")
			}
		}
	})
}

func TestEnginesEnforceMemoryAndPidsLimits(t *testing.T) {
	eachEngine(t, func(t *testing.T, r *runtime.Runc, rootfs string) {
		engine := runtime.Engine(path.Base(t.Name())) // the subtest is named by its engine
		t.Run("past its memory limit the sandbox is OOM-killed and the exit says so", func(t *testing.T) {
			// The init holds the memory. Under gVisor no process is killed inside without
			// envd (the sandbox's OOM killer there, TestEnginesKeepASandboxPastItsMemoryLimit):
			// the host's OOM killer ends the sentry once the sandbox passes its limit and the
			// host cgroup's headroom above it, 256 MiB here.
			script := `x=$(head -c 100000000 /dev/zero | tr '\0' a); echo survived ${#x}`
			if engine == runtime.EngineRunsc {
				script = `exec dd if=/dev/zero of=/dev/null bs=400M count=1`
			}
			s := run(t, r, runtime.Spec{Rootfs: rootfs, Args: sh(script), Limits: runtime.Limits{MemoryBytes: 32 << 20}})
			exit := wait(t, r, s.id)
			// Under gVisor the host's OOM killer may end the sentry (SIGKILL) or the stub
			// process that maps the init's memory, and then the sentry ends with the init's
			// 128+9.
			if !exit.OOMKilled || exit.Signal != "SIGKILL" && exit.Code != 137 {
				t.Fatalf("exit = %+v, want OOMKilled by SIGKILL; stdout:\n%s", exit, s.stdout)
			}
			st, err := r.Stats(context.Background(), s.id)
			if err != nil {
				t.Fatal(err)
			}
			if st.OOMKills == 0 || st.MemoryLimit != 32<<20 {
				t.Fatalf("stats = %+v, want oom kills at the 32 MiB limit", st)
			}
			if strings.Contains(s.stdout.String(), "survived") {
				t.Fatal("the allocation survived the memory limit")
			}
		})
		t.Run("a fork bomb stops at the pids limit and the sandbox lives on", func(t *testing.T) {
			const limit = 16
			s := run(t, r, runtime.Spec{
				Rootfs: rootfs,
				// Only builtins after the bomb: a fork there would fail too.
				Args:   sh(`sh -c 'i=0; while [ $i -lt 300 ]; do sleep 60 & i=$((i+1)); echo $i > /tmp/n; done' 2>/dev/null; read n < /tmp/n; echo forked $n; exec sleep 60`),
				Limits: runtime.Limits{PIDs: limit},
			})
			s.stdout.waitFor(t, "forked", 30*time.Second)
			var n int
			if _, err := fmt.Sscanf(s.stdout.String(), "forked %d", &n); err != nil {
				t.Fatalf("stdout %q: %v", s.stdout, err)
			}
			st, err := r.Stats(context.Background(), s.id)
			if err != nil {
				t.Fatal(err)
			}
			// runsc: the sentry's RLIMIT_NPROC is the limit inside; the host's pids.max, with
			// room for the sentry's threads, the wall behind it.
			hostLimit := uint64(limit)
			if r.Engine(s.id) == runtime.EngineRunsc {
				hostLimit = 3*limit + runtime.RunscHostTasks
			}
			t.Logf("%d of 300 sleeps forked; host tasks %d of pids.max %d", n, st.PIDs, st.PIDsLimit)
			if n >= limit || n == 0 || st.PIDsLimit != hostLimit {
				t.Fatalf("%d of 300 sleeps forked under a limit of %d (pids.max %d)", n, limit, st.PIDsLimit)
			}
			if state, err := r.State(context.Background(), s.id); err != nil || state != runtime.StateRunning {
				t.Fatalf("after the bomb the sandbox is %v (%v), want running", state, err)
			}
		})
	})
}

func TestEnginesDestroyLeavesNothing(t *testing.T) {
	eachEngine(t, func(t *testing.T, r *runtime.Runc, rootfs string) {
		ctx := context.Background()
		for _, tc := range []struct {
			name  string
			args  []string
			setup func(t *testing.T, s *running)
		}{
			{"running", sh("sleep 300 & sleep 300"), func(t *testing.T, s *running) {
				if err := r.Start(ctx, s.id); err != nil {
					t.Fatal(err)
				}
			}},
			{"frozen", sh("sleep 300 & sleep 300"), func(t *testing.T, s *running) {
				if err := r.Start(ctx, s.id); err != nil {
					t.Fatal(err)
				}
				if err := r.Freeze(ctx, s.id); err != nil {
					t.Fatal(err)
				}
			}},
			{"created, never started", sh("sleep 300"), func(t *testing.T, s *running) {}},
			{"exited", sh("true"), func(t *testing.T, s *running) {
				if err := r.Start(ctx, s.id); err != nil {
					t.Fatal(err)
				}
				wait(t, r, s.id)
			}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				s := create(t, r, runtime.Spec{Rootfs: rootfs, Args: tc.args, Limits: runtime.Limits{MemoryBytes: 128 << 20, PIDs: 32}})
				tc.setup(t, s)
				if l := leaks(t, r, s.id, 0); len(l) == 0 {
					t.Fatal("found no mounts, cgroups or netns while the sandbox exists: the leak check is blind")
				}
				t0 := time.Now()
				if err := r.Destroy(ctx, s.id); err != nil {
					t.Fatal(err)
				}
				t.Logf("destroy took %s", time.Since(t0))
				l := leaks(t, r, s.id, s.sb.Pid)
				l = append(l, hostProcessesNaming(t, s.id)...)
				if len(l) > 0 {
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
			})
		}
	})
}

// hostProcessesNaming lists the host's processes (zombies included) whose command line
// names sandbox id: runc's or runsc's own processes left behind.
func hostProcessesNaming(t *testing.T, id string) []string {
	t.Helper()
	var left []string
	deadline := time.Now().Add(2 * time.Second) // a gofer exits a moment after its sentry
	for {
		left = left[:0]
		procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, p := range procs {
			b, _ := os.ReadFile(p)
			stat, _ := os.ReadFile(filepath.Join(filepath.Dir(p), "stat"))
			if strings.Contains(string(b), id) || strings.Contains(string(stat), "(exe) Z") && strings.Contains(string(stat), fmt.Sprintf(" %d ", os.Getpid())) {
				left = append(left, "process: "+string(stat))
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// valueLoop is a script that draws a random value, keeps it only in the shell's memory and
// prints it with the hostname every 50 ms, forever.
const valueLoop = `v=$(cat /proc/sys/kernel/random/uuid); while :; do echo value-$v-$(hostname); usleep 50000; done`

// valueOf returns the value a valueLoop printed first.
func valueOf(t *testing.T, o *output) string {
	t.Helper()
	o.waitFor(t, "value-", 10*time.Second)
	line, _, _ := strings.Cut(o.String(), "\n")
	v := strings.TrimPrefix(line, "value-")
	return v[:36] // a uuid
}

func TestEnginesCheckpointRestoreAndForkKeepMemory(t *testing.T) {
	eachEngine(t, func(t *testing.T, r *runtime.Runc, rootfs string) {
		if err := r.CanCheckpointOn(r.Engine("")); err != nil {
			t.Skipf("checkpoints unavailable: %v", err)
		}
		ctx := context.Background()
		s := create(t, r, runtime.Spec{Rootfs: rootfs, Start: true, Args: sh(`echo file > /file; ` + valueLoop)})
		value := valueOf(t, s.stdout)
		info, err := r.Checkpoint(ctx, s.id)
		if err != nil {
			t.Fatalf("checkpoint: %v", err)
		}
		t.Logf("checkpoint: %+v", info)
		if info.Bytes <= 0 {
			t.Errorf("checkpoint info %+v: no bytes on disk", info)
		}
		if ex := wait(t, r, s.id); !ex.Checkpointed {
			t.Errorf("exit after the checkpoint %+v: want Checkpointed", ex)
		}
		if _, err := r.Stats(ctx, s.id); err == nil {
			t.Errorf("the checkpointed sandbox still has cgroups with stats: its memory is not freed")
		}
		export := filepath.Join(t.TempDir(), "export")
		if n, err := r.Export(ctx, s.id, export); err != nil || n <= 0 {
			t.Fatalf("export: %d bytes, %v", n, err)
		}
		t.Run("a restored sandbox prints the value it held, on new pipes", func(t *testing.T) {
			t0 := time.Now()
			sb, err := r.Restore(ctx, s.id)
			if err != nil {
				t.Fatalf("restore: %v", err)
			}
			t.Logf("restore took %s", time.Since(t0))
			out := collect(sb.Stdout)
			collect(sb.Stderr)
			out.waitFor(t, "value-"+value+"-"+s.id, 10*time.Second)
			if _, err := r.Restore(ctx, s.id); !errors.Is(err, runtime.ErrExists) {
				t.Errorf("restoring a running sandbox: %v, want ErrExists", err)
			}
		})
		t.Run("a fork from the export prints the same value and has the files", func(t *testing.T) {
			child := create(t, r, runtime.Spec{Rootfs: rootfs, Args: sh("true"), Restore: export})
			if got := valueOf(t, child.stdout); got != value {
				t.Fatalf("the fork printed %q, want %q", got, value)
			}
			b, err := os.ReadFile(filepath.Join(r.UpperDir(child.id), "file"))
			if err != nil || string(b) != "file\n" {
				t.Fatalf("the fork's /file: %q, %v", b, err)
			}
			child.stdout.waitFor(t, "-"+child.id+"\n", 10*time.Second) // its hostname is its own id
		})
	})
}

func TestEnginesAdoptAfterANewDriver(t *testing.T) {
	for _, e := range engines {
		t.Run(string(e), func(t *testing.T) {
			runtimetest.Runc(t)
			cfg := runtime.Config{DataDir: t.TempDir(), RuncRoot: t.TempDir(), NetnsDir: t.TempDir(), DefaultEngine: e,
				RunscPath: runtimetest.RunscPath(), RunscRoot: t.TempDir()}
			r1, err := runtime.NewRunc(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			runtimetest.Engine(t, r1, e)
			t.Cleanup(func() { unix.Unmount(filepath.Join(cfg.RunscRoot, "null-netns"), unix.MNT_DETACH) })
			r2, err := runtime.NewRunc(context.Background(), runtime.Config{DataDir: cfg.DataDir, RuncRoot: cfg.RuncRoot, NetnsDir: cfg.NetnsDir,
				RunscPath: cfg.RunscPath, RunscRoot: cfg.RunscRoot}) // its default engine is runc: the sandbox's own is on disk
			if err != nil {
				t.Fatal(err)
			}
			rootfs := runtimetest.BusyboxRootfs(t)
			// Under runc the init holds read ends of its own stdio, as envd does; under runsc
			// it cannot (its stdio are the sentry's host files), and the driver holds them.
			s := create(t, r1, runtime.Spec{Rootfs: rootfs, Start: true, Args: sh(
				`exec 3</proc/self/fd/1 4</proc/self/fd/2; echo ready; while [ ! -e /tmp/go ]; do usleep 20000; done; echo while-away; touch /tmp/written; i=0; while :; do i=$((i+1)); echo tick $i; usleep 20000; done`)})
			s.stdout.waitFor(t, "ready", 10*time.Second)
			s.sb.Stdout.Close() // the first server dies: nobody reads
			s.sb.Stderr.Close()
			<-s.stdout.done
			if err := os.WriteFile(filepath.Join(r1.UpperDir(s.id), "..", "rootfs", "tmp", "go"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(20 * time.Second); !exists(filepath.Join(r1.UpperDir(s.id), "tmp", "written")); time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the sandbox did not write while nobody read its stdout (a write that blocks or fails?)")
				}
			}
			sb, state, err := r2.Adopt(context.Background(), s.id)
			if err != nil {
				t.Fatalf("adopt: %v", err)
			}
			t.Cleanup(func() { _ = r2.Destroy(context.Background(), s.id) })
			if state != runtime.StateRunning || sb.Pid != s.sb.Pid || r2.Engine(s.id) != e {
				t.Fatalf("adopted state %s pid %d engine %s, want running with pid %d on %s", state, sb.Pid, r2.Engine(s.id), s.sb.Pid, e)
			}
			out := collect(sb.Stdout)
			collect(sb.Stderr)
			out.waitFor(t, "while-away\ntick 1\n", 10*time.Second)
			if err := r2.Freeze(context.Background(), s.id); err != nil {
				t.Fatalf("freeze after adopt: %v", err)
			}
			if st, err := r2.State(context.Background(), s.id); err != nil || st != runtime.StatePaused {
				t.Fatalf("state after freeze: %v %v", st, err)
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
			<-out.done
			if l := append(leaks(t, r2, s.id, s.sb.Pid), hostProcessesNaming(t, s.id)...); len(l) > 0 {
				t.Fatalf("left behind:\n%s", strings.Join(l, "\n"))
			}
		})
	}
}

func TestRunscAnswersInsteadOfTheHostKernel(t *testing.T) {
	r := runtimetest.RuncWith(t, runtime.Config{DefaultEngine: runtime.EngineRunsc})
	runtimetest.Engine(t, r, runtime.EngineRunsc)
	var host unix.Utsname
	if err := unix.Uname(&host); err != nil {
		t.Fatal(err)
	}
	hostRelease := unix.ByteSliceToString(host.Release[:])
	hostCmdline, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	s := run(t, r, runtime.Spec{Rootfs: runtimetest.BusyboxRootfs(t), Args: sh(
		`echo release=$(uname -r); echo version=$(cat /proc/version); echo pid1=$(cat /proc/1/comm); echo cmdline=$(cat /proc/cmdline)`)})
	if exit := wait(t, r, s.id); exit.Code != 0 {
		t.Fatalf("exit %+v; stderr:\n%s", exit, s.stderr)
	}
	<-s.stdout.done
	out := s.stdout.String()
	t.Logf("host release %s; sandbox:\n%s", hostRelease, out)
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"uname -r is not the host's kernel release", !strings.Contains(out, "release="+hostRelease+"\n") && strings.Contains(out, "release=")},
		{"/proc/version names gVisor", strings.Contains(out, "version=") && strings.Contains(out, "gvisor")},
		{"pid 1 is the sandbox's init", strings.Contains(out, "pid1=sh\n")},
		// runc masks /proc/cmdline; gVisor shows its own, the host's never.
		{"/proc/cmdline is not the host's", strings.Contains(out, "cmdline=") && !strings.Contains(out, "cmdline="+strings.TrimSpace(string(hostCmdline))+"\n")},
	} {
		if !tc.ok {
			t.Errorf("%s: not so in\n%s", tc.name, out)
		}
	}
}

func TestAskingForAnAbsentEngineFailsNamingIt(t *testing.T) {
	runtimetest.Runc(t)
	missing := filepath.Join(t.TempDir(), "no-runsc")
	cfg := runtime.Config{DataDir: t.TempDir(), RuncRoot: t.TempDir(), NetnsDir: t.TempDir(), RunscPath: missing, RunscRoot: t.TempDir()}
	r, err := runtime.NewRunc(context.Background(), cfg)
	if err != nil {
		t.Fatalf("a host without runsc still runs runc: %v", err)
	}
	if got := r.Engines(); len(got) != 1 || got[0] != runtime.EngineRunc {
		t.Errorf("engines = %v, want only runc", got)
	}
	_, err = r.Create(context.Background(), runtime.Spec{ID: newID(t), Rootfs: runtimetest.BusyboxRootfs(t), Args: sh("true"), Engine: runtime.EngineRunsc})
	if !errors.Is(err, runtime.ErrUnsupported) || !strings.Contains(err.Error(), "runsc") {
		t.Errorf("create on runsc without runsc: %v, want ErrUnsupported naming runsc", err)
	}
	cfg.DefaultEngine = runtime.EngineRunsc
	if _, err := runtime.NewRunc(context.Background(), cfg); !errors.Is(err, runtime.ErrUnsupported) || !strings.Contains(err.Error(), "runsc") {
		t.Errorf("a driver whose default is an absent runsc: %v, want ErrUnsupported naming runsc", err)
	}
	if _, err := runtime.ParseEngine("kata"); !errors.Is(err, runtime.ErrInvalid) || !strings.Contains(err.Error(), `"kata"`) {
		t.Errorf("ParseEngine(kata) = %v, want ErrInvalid naming it", err)
	}
}

func TestEnginesWriteTmpIntoTheSandboxRoot(t *testing.T) {
	eachEngine(t, func(t *testing.T, r *runtime.Runc, rootfs string) {
		s := run(t, r, runtime.Spec{Rootfs: rootfs, Args: sh(`echo kept > /tmp/f; grep -c ' /tmp ' /proc/self/mountinfo | sed 's/^/tmp-mounts=/'; grep ' /tmp ' /proc/self/mountinfo; echo done; sleep 300`)})
		s.stdout.waitFor(t, "done", 10*time.Second)
		t.Logf("sandbox:\n%s", s.stdout)
		if b, err := os.ReadFile(filepath.Join(r.UpperDir(s.id), "tmp", "f")); err != nil || string(b) != "kept\n" {
			t.Fatalf("/tmp/f in the sandbox's upper dir: %q, %v (a tmpfs of the engine's own?)", b, err)
		}
		if strings.Contains(s.stdout.String(), filepath.Dir(r.UpperDir(s.id))) {
			t.Errorf("the sandbox's mountinfo names its host directory")
		}
	})
}
