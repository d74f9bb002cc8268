package runtime

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/internal/observe/telemetry"
)

// fakeRunc writes a runc stand-in whose pause fails with runc's "unable to freeze" the
// first fails times (counted in a file), then succeeds. runc's freezer gives up that way
// only under load, which a test cannot bring about on cue.
func fakeRunc(t *testing.T, fails int) (path, count string) {
	t.Helper()
	dir := t.TempDir()
	path, count = filepath.Join(dir, "runc"), filepath.Join(dir, "count")
	script := fmt.Sprintf(`#!/bin/sh
n=$(cat %[1]q 2>/dev/null || echo 0); n=$((n+1)); echo $n > %[1]q
if [ "$n" -le %[2]d ]; then
  echo 'level=error msg="unable to freeze"' >&2; exit 1
fi
`, count, fails)
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path, count
}

func TestFreezeTriesAgainWhenTheFreezerGivesUp(t *testing.T) {
	var logs bytes.Buffer
	ctx := telemetry.WithLogger(context.Background(), telemetry.NewLogger(&logs, slog.LevelInfo))

	runc, count := fakeRunc(t, 2)
	r := &Runc{cfg: Config{RuncPath: runc, RuncRoot: t.TempDir()}, locks: map[string]*idLock{}}
	if err := r.Freeze(ctx, "sb1"); err != nil {
		t.Fatalf("freeze after two failed tries: %v", err)
	}
	if b, _ := os.ReadFile(count); strings.TrimSpace(string(b)) != "3" {
		t.Errorf("runc pause ran %s times, want 3", b)
	}
	if n := strings.Count(logs.String(), "freeze did not take"); n != 2 {
		t.Errorf("%d retry lines, want 2: %s", n, logs.String())
	}

	runc, _ = fakeRunc(t, 9)
	r = &Runc{cfg: Config{RuncPath: runc, RuncRoot: t.TempDir()}, locks: map[string]*idLock{}}
	err := r.Freeze(ctx, "sb2")
	if err == nil || !strings.Contains(err.Error(), "unable to freeze") || !strings.Contains(err.Error(), "try 5") {
		t.Errorf("freeze that never takes: %v, want the runc error after 5 tries", err)
	}
}

// TestFreezeV1WaitsForEveryTask freezes a cgroup v1 freezer holding a busy shell loop and
// its children, then thaws it; it needs root and the v1 freezer, as sandboxes do here.
func TestFreezeV1WaitsForEveryTask(t *testing.T) {
	root := filepath.Join(cgroupRoot, "freezer")
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a freezer cgroup")
	}
	if _, err := os.Stat(filepath.Join(root, "tasks")); err != nil {
		t.Skipf("no cgroup v1 freezer at %s: %v", root, err)
	}
	dir := filepath.Join(root, "cove-test-"+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = removeCgroups(strings.TrimPrefix(dir, root)) })

	busy := exec.Command("/bin/sh", "-c", "sleep 60 & while :; do :; done")
	if err := busy.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = thawV1(filepath.Join(dir, "freezer.state"))
		_ = busy.Process.Kill()
		_ = busy.Wait()
		if b, err := os.ReadFile(filepath.Join(dir, "tasks")); err == nil {
			for _, p := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(p); err == nil {
					_ = unix.Kill(pid, unix.SIGKILL)
				}
			}
		}
	})
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(busy.Process.Pid)), 0); err != nil {
		t.Fatal(err)
	}

	// Before the freeze every task is named, the busy shell among them.
	if got, want := unfrozenTasks(dir), fmt.Sprintf("%d (sh) ", busy.Process.Pid); !strings.HasPrefix(got, "; not frozen: ") || !strings.Contains(got, want) {
		t.Errorf("unfrozenTasks of a thawed cgroup = %q, want it to name %q", got, want)
	}
	if err := freezeV1(context.Background(), dir, freezePatience); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "freezer.state")); strings.TrimSpace(string(b)) != "FROZEN" {
		t.Errorf("freezer.state = %s after freezeV1, want FROZEN", b)
	}
	// A task frozen where it slept (kernels since 6.1 freeze a sleeping task in place, not in
	// __refrigerator) reads D at its own wait channel: none may read running or sleeping.
	if got := unfrozenTasks(dir); got != "" {
		for _, task := range strings.Split(strings.TrimPrefix(got, "; not frozen: "), ", ") {
			if !strings.Contains(task, ") D") {
				t.Errorf("unfrozenTasks of a frozen cgroup names %q, neither frozen in __refrigerator nor in place (D)", task)
			}
		}
	}
	if err := thawV1(filepath.Join(dir, "freezer.state")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "freezer.state")); strings.TrimSpace(string(b)) != "THAWED" {
		t.Errorf("freezer.state = %s after thawV1, want THAWED", b)
	}
}
