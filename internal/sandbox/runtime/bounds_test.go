package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/sandbox/runtime"
)

func TestOpenFilesAreBoundedByNoFile(t *testing.T) {
	r, rootfs := newRuntime(t)
	s := run(t, r, runtime.Spec{
		Rootfs: rootfs,
		Args: sh(strings.Join([]string{
			"grep 'Max open files' /proc/self/limits | tr -s ' ' | sed 's/^/limits=/'",
			"ulimit -Hn 100000 2>/dev/null && echo raise=allowed || echo raise=refused",
			"echo done",
		}, "; ")),
		Limits: runtime.Limits{NoFile: 256, PIDs: 16},
	})
	if exit := wait(t, r, s.id); exit.Code != 0 {
		t.Fatalf("init exit = %+v, stderr:\n%s", exit, s.stderr)
	}
	<-s.stdout.done
	out := s.stdout.String()
	t.Logf("sandbox output:\n%s", out)
	for _, tc := range []struct{ name, want string }{
		{"the soft and hard open-file limits are the bound", "limits=Max open files 256 256 files \n"},
		{"root in the sandbox cannot raise the hard limit", "raise=refused\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(out, tc.want) {
				t.Fatalf("want %q in output", tc.want)
			}
		})
	}
}

func TestHostDetailsAreMasked(t *testing.T) {
	r, rootfs := newRuntime(t)
	s := run(t, r, runtime.Spec{
		Rootfs: rootfs,
		Args: sh(strings.Join([]string{
			"echo cmdline=$(wc -c < /proc/cmdline)",
			"echo sysblock=$(ls /sys/block | wc -l)",
			"echo virtualblock=$(ls /sys/devices/virtual/block 2>/dev/null | wc -l)",
			"echo classblock=$(ls /sys/class/block | wc -l)",
			"echo partitions=$(wc -c < /proc/partitions)",
			"echo diskstats=$(wc -c < /proc/diskstats)",
			"grep ' / / ' /proc/self/mountinfo | sed 's/^/root=/'",
			"echo done",
		}, "; ")),
	})
	if exit := wait(t, r, s.id); exit.Code != 0 {
		t.Fatalf("init exit = %+v, stderr:\n%s", exit, s.stderr)
	}
	<-s.stdout.done
	out := s.stdout.String()
	t.Logf("sandbox output:\n%s", out)
	for _, want := range []string{"cmdline=0\n", "sysblock=0\n", "virtualblock=0\n", "classblock=0\n", "partitions=0\n", "diskstats=0\n"} {
		t.Run(strings.TrimSuffix(want, "=0\n")+" shows nothing of the host", func(t *testing.T) {
			if !strings.Contains(out, want) {
				t.Fatalf("want %q in output", want)
			}
		})
	}
	t.Run("the root mount names no host path", func(t *testing.T) {
		var root string
		for _, l := range strings.Split(out, "\n") {
			if v, ok := strings.CutPrefix(l, "root="); ok {
				root = v
			}
		}
		if root == "" {
			t.Fatal("no root mount in the sandbox's mountinfo")
		}
		// The test's data dir and busybox root both live under the temp dir.
		if strings.Contains(root, os.TempDir()) {
			t.Fatalf("root mount shows host paths: %s", root)
		}
	})
}

func TestAForkBombedSandboxIsKilledAndLeavesNothing(t *testing.T) {
	r, rootfs := newRuntime(t)
	ctx := context.Background()
	s := run(t, r, runtime.Spec{
		Rootfs: rootfs,
		Args:   sh(`echo bombing; b() { b | b & }; b; sleep 300`),
		Limits: runtime.Limits{MemoryBytes: 512 << 20, CPUs: 2, PIDs: 1024},
	})
	s.stdout.waitFor(t, "bombing", 10*time.Second)
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, err := r.Stats(ctx, s.id)
		if err != nil {
			t.Fatal(err)
		}
		if st.PIDs >= 1000 || time.Now().After(deadline) {
			t.Logf("pids before the kill: %d of %d", st.PIDs, st.PIDsLimit)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	t0 := time.Now()
	if err := r.Destroy(ctx, s.id); err != nil {
		t.Fatal(err)
	}
	t.Logf("destroying the fork-bombed sandbox took %s", time.Since(t0))
	if l := leaks(t, r, s.id, s.sb.Pid); len(l) > 0 {
		t.Fatalf("left behind:\n%s", strings.Join(l, "\n"))
	}
}

func TestASandboxWithoutANoFileLimitGetsTheDefaultNotTheServers(t *testing.T) {
	r, rootfs := newRuntime(t)
	s := run(t, r, runtime.Spec{Rootfs: rootfs, Args: sh("grep 'Max open files' /proc/self/limits | tr -s ' '")})
	if exit := wait(t, r, s.id); exit.Code != 0 {
		t.Fatalf("init exit = %+v, stderr:\n%s", exit, s.stderr)
	}
	<-s.stdout.done
	want := fmt.Sprintf("Max open files %d %d files \n", runtime.DefaultNoFile, runtime.DefaultNoFile)
	if got := s.stdout.String(); got != want {
		t.Fatalf("limits = %q, want %q", got, want)
	}
}

func TestABindMustFitItsTargetAndNamesNoHostPath(t *testing.T) {
	r, rootfs := newRuntime(t)
	dir := t.TempDir()
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		bind runtime.Bind
	}{
		{"a directory over a file (/etc/passwd)", runtime.Bind{Source: dir, Target: "/etc/passwd"}},
		{"a directory under a file", runtime.Bind{Source: dir, Target: "/etc/passwd/x"}},
		{"a file over a directory", runtime.Bind{Source: file, Target: "/etc"}},
	} {
		t.Run(tc.name+" is refused", func(t *testing.T) {
			_, err := r.Create(context.Background(), runtime.Spec{ID: newID(t), Rootfs: rootfs, Args: sh("true"), Binds: []runtime.Bind{tc.bind}})
			if !errors.Is(err, runtime.ErrBindTarget) {
				t.Fatalf("create: %v; want ErrBindTarget", err)
			}
			if strings.Contains(err.Error(), os.TempDir()) || !strings.Contains(err.Error(), tc.bind.Target) {
				t.Fatalf("error %q should name %s and no host path", err, tc.bind.Target)
			}
		})
	}
	t.Run("a directory onto a new path is mounted", func(t *testing.T) {
		s := run(t, r, runtime.Spec{Rootfs: rootfs, Args: sh("test -d /data/new/deep && echo mounted"), Binds: []runtime.Bind{{Source: dir, Target: "/data/new/deep"}}})
		if exit := wait(t, r, s.id); exit.Code != 0 {
			t.Fatalf("init exit = %+v, stderr:\n%s", exit, s.stderr)
		}
	})
}
