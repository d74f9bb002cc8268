package runtime

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

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

// readStats reads a sandbox's cgroup v1 accounting files.
func readStats(path string) (Stats, error) {
	mem := filepath.Join(cgroupRoot, "memory", path)
	if _, err := os.Stat(mem); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return Stats{}, ErrNotFound
		}
		return Stats{}, err
	}
	var s Stats
	var errs []error
	u := func(file string) uint64 {
		v, err := readUint(file)
		if err != nil {
			errs = append(errs, err)
		}
		return v
	}
	s.MemoryUsage = u(filepath.Join(mem, "memory.usage_in_bytes"))
	s.MemoryMaxUsage = u(filepath.Join(mem, "memory.max_usage_in_bytes"))
	s.MemoryLimit = u(filepath.Join(mem, "memory.limit_in_bytes"))
	s.MemoryFailCnt = u(filepath.Join(mem, "memory.failcnt"))
	if kv, err := readKeyValues(filepath.Join(mem, "memory.stat")); err == nil {
		s.MemoryRSS, s.MemoryCache = kv["total_rss"], kv["total_cache"]
	} else {
		errs = append(errs, err)
	}
	if kv, err := readKeyValues(filepath.Join(mem, "memory.oom_control")); err == nil {
		s.OOMKills, s.UnderOOM = kv["oom_kill"], kv["under_oom"] == 1
	} else {
		errs = append(errs, err)
	}
	s.CPU = time.Duration(u(filepath.Join(cgroupRoot, "cpuacct", path, "cpuacct.usage")))
	s.PIDs = u(filepath.Join(cgroupRoot, "pids", path, "pids.current"))
	if b, err := os.ReadFile(filepath.Join(cgroupRoot, "pids", path, "pids.max")); err == nil {
		s.PIDsLimit, _ = strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64) // "max" reads as 0
	}
	return s, errors.Join(errs...)
}

// oomKills returns the memory cgroup's OOM kill counter, or 0 when it cannot be read.
func oomKills(path string) uint64 {
	kv, err := readKeyValues(filepath.Join(cgroupRoot, "memory", path, "memory.oom_control"))
	if err != nil {
		return 0
	}
	return kv["oom_kill"]
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

// readKeyValues parses "key value" lines (memory.stat, memory.oom_control).
func readKeyValues(file string) (map[string]uint64, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	kv := map[string]uint64{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		k, v, ok := strings.Cut(s.Text(), " ")
		if !ok {
			continue
		}
		if n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64); err == nil {
			kv[k] = n
		}
	}
	return kv, s.Err()
}
