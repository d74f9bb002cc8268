package runtime

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cove-dev/cove/internal/sandbox/cgroup"
	"golang.org/x/sys/unix"
)

const cgroupRoot = "/sys/fs/cgroup"

// cgroupDirs lists the directories a sandbox's absolute cgroup path names in every hierarchy
// mounted under /sys/fs/cgroup (v1 controllers, name=systemd, the v2 "unified" tree).
func cgroupDirs(path string) []string {
	entries, err := os.ReadDir(cgroupRoot)
	if err != nil {
		return nil
	}
	var dirs []string
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		dirs = append(dirs, filepath.Join(cgroupRoot, e.Name(), path))
	}
	return dirs
}

// removeCgroups removes a sandbox's cgroup directories left in any hierarchy. A cgroup still
// holding processes cannot be removed: that is reported, since it means a leak.
func removeCgroups(path string) error {
	var errs []error
	for _, dir := range cgroupDirs(path) {
		var err error
		for i := 0; i < 50; i++ {
			// The kernel releases an emptied cgroup asynchronously: retry EBUSY briefly.
			if err = unix.Rmdir(dir); err == nil || !errors.Is(err, unix.EBUSY) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", dir, err))
		}
	}
	return errors.Join(errs...)
}

// haltCgroup stops every task of a sandbox's cgroup path without waiting: cgroup v2's
// cgroup.kill kills them all where the kernel has it, else the v1 freezer is set FROZEN (the
// tasks stop as the kernel reaches them, new children are born frozen). thaw undoes the
// freeze, for after the tasks are sent SIGKILL (a frozen task dies once thawed); it does
// nothing when nothing was frozen.
func haltCgroup(path string) (thaw func()) {
	for _, dir := range cgroupDirs(path) {
		if writeControl(filepath.Join(dir, "cgroup.kill"), "1") == nil {
			return func() {}
		}
	}
	state := filepath.Join(cgroupRoot, "freezer", path, "freezer.state")
	if writeControl(state, "FROZEN") != nil {
		return func() {}
	}
	return func() { _ = thawV1(state) }
}

// writeControl writes v to a cgroup control file that exists, never creating one.
func writeControl(file, v string) error {
	f, err := os.OpenFile(file, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(v)
	return errors.Join(err, f.Close())
}

// hostCgroups is the host's cgroup filesystem, v1 or v2: the one reader (internal/sandbox/cgroup)
// reads a sandbox's accounting from it.
var hostCgroups = sync.OnceValue(func() cgroup.FS { return cgroup.Detect(cgroupRoot) })

// readStats reads a sandbox's cgroup accounting.
func readStats(path string) (Stats, error) {
	fs := hostCgroups()
	buf := make([]byte, 8<<10)
	m, err := fs.ReadMemory(path, buf)
	if errors.Is(err, cgroup.ErrNotFound) {
		return Stats{}, ErrNotFound
	}
	s := Stats{MemoryUsage: m.Usage, MemoryMaxUsage: m.MaxUsage, MemoryLimit: m.Limit, MemoryFailCnt: m.FailCnt,
		MemoryRSS: m.RSS, MemoryCache: m.Cache, OOMKills: m.OOMKills, UnderOOM: m.UnderOOM}
	cpu, cerr := fs.ReadCPU(path, buf)
	s.CPU = cpu
	var perr error
	s.PIDs, s.PIDsLimit, perr = fs.ReadPIDs(path, buf)
	return s, errors.Join(err, cerr, perr)
}

// oomKills returns the memory cgroup's OOM kill counter, or 0 when it cannot be read.
func oomKills(path string) uint64 {
	n, _ := hostCgroups().OOMKills(path, nil)
	return n
}

func readUint(file string) (uint64, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse %s: %w", file, err)
	}
	return v, nil
}
