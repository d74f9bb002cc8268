package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/cove-dev/cove/bench/internal/measure"
	"github.com/cove-dev/cove/internal/sandbox/runtime"
)

// cgroupAttach times what runc's first move of a sandbox's init into its cgroups costs: the
// first pid written into a new v1 cgroup after a quiet moment (the kernel's global cgroup
// lock waits for an RCU grace period there unless favordynmods is on, which cove server turns
// on at start: runtime.FavorDynMods). It returns the p50 and whether the option is on.
func cgroupAttach(n int) (time.Duration, bool, error) {
	on, err := runtime.FavorDynMods()
	if err != nil {
		return 0, false, err
	}
	ds, err := measure.Runs(n, func() (time.Duration, error) {
		dir := filepath.Join("/sys/fs/cgroup/pids", fmt.Sprintf("cove-bench-attach-%d", os.Getpid()))
		if err := os.Mkdir(dir, 0o755); err != nil {
			return 0, err
		}
		defer os.Remove(dir)
		cmd := exec.Command("sleep", "60")
		if err := cmd.Start(); err != nil {
			return 0, err
		}
		defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
		time.Sleep(50 * time.Millisecond) // a quiet moment, as between two creates
		t0 := time.Now()
		err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0)
		return time.Since(t0), err
	})
	if err != nil {
		return 0, on, err
	}
	return measure.Pct(ds, 50), on, nil
}
