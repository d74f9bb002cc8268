package sampler

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	goruntime "runtime"
	"sync"
	"syscall"
	"time"

	"github.com/cove-dev/cove/internal/sandbox/cgroup"
	"golang.org/x/sys/unix"
)

// cgroupRoot is where the cgroup v1 hierarchies are mounted.
const cgroupRoot = "/sys/fs/cgroup"

// hostCgroups is the host's cgroup filesystem, v1 or v2, read by the one reader
// (internal/sandbox/cgroup).
var hostCgroups = sync.OnceValue(func() cgroup.FS { return cgroup.Detect(cgroupRoot) })

// cgroupStats are the cgroup numbers a sample needs: a subset of runtime.Stats, read with
// four small reads into the caller's buffer.
type cgroupStats struct {
	cpu          time.Duration // cpuacct.usage (v2: cpu.stat usage_usec)
	usage        uint64        // memory.usage_in_bytes (v2: memory.current)
	limit        uint64        // memory.limit_in_bytes (v2: memory.max)
	cache        uint64        // memory.stat total_cache (v2: file)
	inactiveFile uint64        // memory.stat total_inactive_file (v2: inactive_file)
}

func readCgroup(path string, buf []byte) (cgroupStats, error) {
	fs := hostCgroups()
	m, err := fs.ReadUsage(path, buf)
	if err != nil {
		return cgroupStats{}, err
	}
	cpu, err := fs.ReadCPU(path, buf)
	if err != nil {
		return cgroupStats{}, err
	}
	return cgroupStats{cpu: cpu, usage: m.Usage, limit: m.Limit, cache: m.Cache, inactiveFile: m.InactiveFile}, nil
}

func parseUint(b []byte) uint64 {
	v, _ := parseUintOK(b)
	return v
}

// parseUintOK parses leading decimal digits after spaces, without allocating.
func parseUintOK(b []byte) (uint64, bool) {
	b = bytes.TrimLeft(b, " \t")
	var v uint64
	i := 0
	for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
		d := uint64(b[i] - '0')
		if v > (math.MaxUint64-d)/10 {
			return math.MaxUint64, true
		}
		v = v*10 + d
	}
	return v, i > 0
}

// netStats sums the counters of every interface in a network namespace.
type netStats struct {
	rxBytes, rxPackets, txBytes, txPackets uint64
}

// readNetns reads /proc/net/dev as the network namespace pinned at path sees it. A thread
// sees its own namespace's devices in /proc/thread-self/net, so the read happens on a locked
// thread that has entered the namespace and returns to its own afterwards (the pattern of
// runtime's dialInNetns). If the return fails, the thread stays locked and the Go runtime
// discards it with the goroutine.
func readNetns(path string, buf []byte) (netStats, error) {
	ns, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return netStats{}, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(ns)
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	go func() {
		goruntime.LockOSThread()
		self, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			goruntime.UnlockOSThread()
			done <- result{0, fmt.Errorf("own netns: %w", err)}
			return
		}
		defer unix.Close(self)
		if err := unix.Setns(ns, unix.CLONE_NEWNET); err != nil {
			goruntime.UnlockOSThread()
			done <- result{0, fmt.Errorf("enter netns: %w", err)}
			return
		}
		b, err := cgroup.ReadSmall("/proc/thread-self/net/dev", buf)
		if serr := unix.Setns(self, unix.CLONE_NEWNET); serr != nil {
			done <- result{0, fmt.Errorf("return to host netns: %w", serr)}
			return // thread stays locked and dies with this goroutine
		}
		goruntime.UnlockOSThread()
		done <- result{len(b), err}
	}()
	r := <-done
	if r.err != nil {
		return netStats{}, r.err
	}
	return parseNetDev(buf[:r.n]), nil
}

// parseNetDev sums /proc/net/dev: two header lines, then per interface
// "name: rx_bytes rx_packets errs drop fifo frame compressed multicast tx_bytes tx_packets ...".
func parseNetDev(b []byte) netStats {
	var s netStats
	for line := range bytes.Lines(b) {
		_, counters, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		var f [10]uint64
		for i := range f {
			counters = bytes.TrimLeft(counters, " ")
			end := bytes.IndexByte(counters, ' ')
			if end < 0 {
				end = len(counters)
			}
			f[i] = parseUint(counters[:end])
			counters = counters[end:]
		}
		s.rxBytes += f[0]
		s.rxPackets += f[1]
		s.txBytes += f[8]
		s.txPackets += f[9]
	}
	return s
}

// diskUsage is the space the files under dir take, as du counts it (allocated blocks, so
// sparse files count what they hold). It stops after maxEntries entries, reporting what it
// saw and complete=false. dir itself missing is an error wrapping os.ErrNotExist; entries
// vanishing during the walk are skipped.
func diskUsage(dir string, maxEntries int) (used uint64, complete bool, err error) {
	entries := 0
	errStop := errors.New("stop")
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == dir || !errors.Is(err, os.ErrNotExist) {
				return err
			}
			return nil
		}
		if entries++; entries > maxEntries {
			return errStop
		}
		info, err := d.Info()
		if err != nil {
			return nil // removed since it was listed
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			used += uint64(st.Blocks) * 512
		}
		return nil
	})
	if errors.Is(err, errStop) {
		return used, false, nil
	}
	return used, err == nil, err
}

// fsSize is the size of the filesystem holding path, 0 when unknown.
func fsSize(path string) uint64 {
	var st unix.Statfs_t
	if unix.Statfs(path, &st) != nil {
		return 0
	}
	return st.Blocks * uint64(st.Bsize)
}

// hostMemory is the host's MemTotal, what an unlimited sandbox may use.
func hostMemory() uint64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return math.MaxInt64
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := bytes.CutPrefix(s.Bytes(), []byte("MemTotal:")); ok {
			return parseUint(v) * 1024 // kB
		}
	}
	return math.MaxInt64
}
