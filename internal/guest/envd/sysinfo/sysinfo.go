// Package sysinfo reads the sandbox's resource usage for envd's /metrics: from the sandbox's
// own cgroup when one is visible (inside a Cove sandbox), otherwise from /proc for the machine.
// Nothing here polls: CPU use is the average since the previous call.
package sysinfo

import (
	"bufio"
	"bytes"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cove-dev/cove/internal/sandbox/cgroup"
	"golang.org/x/sys/unix"
)

// Metrics is envd's /metrics body, in E2B's field names; sizes in bytes.
type Metrics struct {
	Timestamp   int64   `json:"ts"`
	CPUCount    int     `json:"cpu_count"`
	CPUUsedPct  float64 `json:"cpu_used_pct"`
	MemTotal    uint64  `json:"mem_total"`
	MemUsed     uint64  `json:"mem_used"`
	MemCache    uint64  `json:"mem_cache"`
	MemTotalMiB uint64  `json:"mem_total_mib"`
	MemUsedMiB  uint64  `json:"mem_used_mib"`
	DiskUsed    uint64  `json:"disk_used"`
	DiskTotal   uint64  `json:"disk_total"`
}

// Sampler computes Metrics; CPU use is averaged between successive calls.
type Sampler struct {
	Root string // the filesystem whose usage is reported; "/" when empty

	mu       sync.Mutex
	lastBusy float64 // CPU seconds used, all cores
	lastAt   time.Time
}

// Sample reads the current metrics.
func (s *Sampler) Sample() Metrics {
	now := time.Now()
	m := Metrics{Timestamp: now.Unix(), CPUCount: runtime.NumCPU()}

	busy := cpuSeconds()
	s.mu.Lock()
	if s.lastAt.IsZero() || now.Sub(s.lastAt) > 10*time.Minute {
		s.mu.Unlock()
		time.Sleep(100 * time.Millisecond) // first call: measure over a short window
		s.mu.Lock()
		s.lastBusy, s.lastAt = busy, now
		now = time.Now()
		busy = cpuSeconds()
	}
	if wall := now.Sub(s.lastAt).Seconds(); wall > 0 && m.CPUCount > 0 {
		pct := (busy - s.lastBusy) / wall / float64(m.CPUCount) * 100
		m.CPUUsedPct = float64(int(min(max(pct, 0), 100)*100)) / 100
	}
	s.lastBusy, s.lastAt = busy, now
	s.mu.Unlock()

	m.MemTotal, m.MemUsed, m.MemCache = memory()
	m.MemTotalMiB, m.MemUsedMiB = m.MemTotal>>20, m.MemUsed>>20

	root := s.Root
	if root == "" {
		root = "/"
	}
	var fs unix.Statfs_t
	if unix.Statfs(root, &fs) == nil {
		m.DiskTotal = fs.Blocks * uint64(fs.Bsize)
		m.DiskUsed = (fs.Blocks - fs.Bfree) * uint64(fs.Bsize)
	}
	return m
}

// ownCgroup is the sandbox's cgroup, v1 or v2, seen from inside (its root is the sandbox's).
var ownCgroup = sync.OnceValue(func() cgroup.FS { return cgroup.Detect("/sys/fs/cgroup") })

// cpuSeconds is the CPU time used: the cgroup's when visible, else the machine's busy time.
func cpuSeconds() float64 {
	if inCgroup() {
		if d, err := ownCgroup().ReadCPU("", nil); err == nil {
			return d.Seconds()
		}
	}
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := strings.Fields(string(line))
	var busy float64
	for i, v := range f[1:] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		n, _ := strconv.ParseFloat(v, 64)
		busy += n
	}
	return busy / 100 // USER_HZ
}

// inCgroup reports whether envd sees its own sandbox cgroup at the cgroup root, as it does
// inside a container with a private cgroup view.
func inCgroup() bool {
	b, err := os.ReadFile("/proc/1/cgroup")
	return err == nil && os.Getpid() == 1 && len(b) > 0
}

// memory returns total, used and page cache bytes.
func memory() (total, used, cache uint64) {
	info := meminfo()
	total = info["MemTotal"]
	used = total - info["MemAvailable"]
	cache = info["Cached"] + info["Buffers"]
	if inCgroup() {
		if m, err := ownCgroup().ReadUsage("", nil); err == nil {
			if m.Limit > 0 && m.Limit < total {
				total = m.Limit
			}
			if m.Usage > 0 {
				cache = m.Cache
				used = m.Usage - min(m.Usage, m.InactiveFile)
			}
		}
	}
	return total, used, cache
}

func meminfo() map[string]uint64 {
	out := map[string]uint64{}
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fields := strings.Fields(v)
		if len(fields) == 0 {
			continue
		}
		n, _ := strconv.ParseUint(fields[0], 10, 64)
		if len(fields) > 1 && fields[1] == "kB" {
			n *= 1024
		}
		out[k] = n
	}
	return out
}
