// Package cgroup reads a cgroup's accounting — memory, CPU time, process count — on cgroup v1
// (one hierarchy per controller, as this machine class mounts it) and on v2 (the unified
// hierarchy, where hosts without v1 have only that): the one reader the runtime (a sandbox's
// Stats, its OOM kills), the sampler (its samples) and envd (its own sandbox, from inside)
// share.
//
// The one idea: a cgroup is a path below a mount (FS); the version decides only which file
// holds a figure and how it is spelled, so callers never name a cgroupfs file themselves.
// Reads go through a buffer the caller may keep (the sampler reads thousands a second).
//
// cgroup imports nothing of Cove's: the guest (envd) and the host both use it.
package cgroup

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// FS is a cgroup filesystem mounted at Root, of version 1 or 2.
type FS struct {
	Root string
	V2   bool
}

// Detect returns the cgroup filesystem mounted at root (usually /sys/fs/cgroup): v2 when root
// is the unified hierarchy (it holds cgroup.controllers), v1 otherwise.
func Detect(root string) FS {
	_, err := os.Stat(filepath.Join(root, "cgroup.controllers"))
	return FS{Root: root, V2: err == nil}
}

// Unlimited is the limit a cgroup without one reads as (v2's "max"; v1 writes a number near
// it).
const Unlimited = math.MaxInt64

// Memory is a cgroup's memory accounting, in bytes.
type Memory struct {
	Usage    uint64 // in use now, page cache included
	Limit    uint64 // the hard limit; Unlimited when none
	MaxUsage uint64 // the peak (0 where the kernel keeps none: v2 before 5.19)
	FailCnt  uint64 // times usage hit the limit (v2: memory.events max)
	RSS      uint64 // anonymous memory (v1 total_rss, v2 anon)
	Cache    uint64 // page cache (v1 total_cache, v2 file)
	// InactiveFile is the page cache the kernel reclaims first: usage less it is what the
	// sandbox's processes hold.
	InactiveFile uint64
	OOMKills     uint64 // processes the OOM killer ended in the cgroup
	UnderOOM     bool   // the cgroup is stuck at its limit (v1 only)
}

// ErrNotFound: no such cgroup (the sandbox is gone).
var ErrNotFound = errors.New("cgroup not found")

// file is path's file name of a controller: <root>/<controller>/<path>/<name> on v1,
// <root>/<path>/<name> on v2.
func (f FS) file(controller, path, name string) string {
	if path != "" && path[0] != '/' {
		path = "/" + path
	}
	if f.V2 {
		return f.Root + path + "/" + name
	}
	return f.Root + "/" + controller + path + "/" + name
}

// ReadMemory reads path's memory accounting ("" is the mount's own cgroup: a sandbox's, seen
// from inside it). buf holds each file while it is parsed; nil allocates one.
func (f FS) ReadMemory(path string, buf []byte) (Memory, error) {
	buf = sized(buf)
	m, err := f.usage(path, buf)
	if err != nil {
		return m, err
	}
	var xerr error
	if f.V2 {
		m.MaxUsage, _ = readUint(f.file("memory", path, "memory.peak"), buf) // a kernel before 5.19 keeps none
		var ev [3]uint64
		ev, xerr = readKeys(f.file("memory", path, "memory.events"), buf, "max", "oom_kill")
		m.FailCnt, m.OOMKills = ev[0], ev[1]
	} else {
		if m.MaxUsage, err = readUint(f.file("memory", path, "memory.max_usage_in_bytes"), buf); err == nil {
			m.FailCnt, err = readUint(f.file("memory", path, "memory.failcnt"), buf)
		}
		if err != nil {
			return m, notFound(err)
		}
		var oc [3]uint64
		oc, xerr = readKeys(f.file("memory", path, "memory.oom_control"), buf, "oom_kill", "under_oom")
		m.OOMKills, m.UnderOOM = oc[0], oc[1] == 1
	}
	return m, errors.Join(f.stat(path, buf, &m), xerr)
}

// ReadUsage reads the part of path's memory accounting a sample needs, with three reads:
// Usage, Limit, RSS, Cache and InactiveFile.
func (f FS) ReadUsage(path string, buf []byte) (Memory, error) {
	buf = sized(buf)
	m, err := f.usage(path, buf)
	if err != nil {
		return m, err
	}
	return m, f.stat(path, buf, &m)
}

// usage reads path's memory in use and its limit: the files that say whether the cgroup is
// there at all.
func (f FS) usage(path string, buf []byte) (Memory, error) {
	cur, max := "memory.usage_in_bytes", "memory.limit_in_bytes"
	if f.V2 {
		cur, max = "memory.current", "memory.max"
	}
	var m Memory
	var err error
	if m.Usage, err = readUint(f.file("memory", path, cur), buf); err != nil {
		return m, notFound(err)
	}
	if m.Limit, err = readUint(f.file("memory", path, max), buf); err != nil {
		return m, notFound(err)
	}
	return m, nil
}

// stat reads the RSS, page cache and inactive page cache of path's memory.stat into m.
func (f FS) stat(path string, buf []byte, m *Memory) error {
	keys := [3]string{"total_rss", "total_cache", "total_inactive_file"}
	if f.V2 {
		keys = [3]string{"anon", "file", "inactive_file"}
	}
	kv, err := readKeys(f.file("memory", path, "memory.stat"), buf, keys[:]...)
	m.RSS, m.Cache, m.InactiveFile = kv[0], kv[1], kv[2]
	return notFound(err)
}

// ReadLimit reads path's memory limit alone: Unlimited, or v1's number near it, when none.
func (f FS) ReadLimit(path string, buf []byte) (uint64, error) {
	name := "memory.limit_in_bytes"
	if f.V2 {
		name = "memory.max"
	}
	v, err := readUint(f.file("memory", path, name), sized(buf))
	return v, notFound(err)
}

// OOMKills reads path's OOM kill count alone (envd reads it around every process it starts).
func (f FS) OOMKills(path string, buf []byte) (uint64, error) {
	buf = sized(buf)
	name, key := "memory.oom_control", "oom_kill"
	if f.V2 {
		name = "memory.events"
	}
	kv, err := readKeys(f.file("memory", path, name), buf, key)
	if err != nil {
		return 0, notFound(err)
	}
	return kv[0], nil
}

// ReadCPU reads the CPU time path's processes used.
func (f FS) ReadCPU(path string, buf []byte) (time.Duration, error) {
	buf = sized(buf)
	if f.V2 {
		kv, err := readKeys(f.file("cpu", path, "cpu.stat"), buf, "usage_usec")
		if err != nil {
			return 0, notFound(err)
		}
		return time.Duration(min(kv[0], math.MaxInt64/1000)) * time.Microsecond, nil
	}
	ns, err := readUint(f.file("cpuacct", path, "cpuacct.usage"), buf)
	if err != nil {
		return 0, notFound(err)
	}
	return time.Duration(min(ns, math.MaxInt64)), nil
}

// ReadPIDs reads path's process count and its limit (0 when there is none).
func (f FS) ReadPIDs(path string, buf []byte) (current, limit uint64, err error) {
	buf = sized(buf)
	if current, err = readUint(f.file("pids", path, "pids.current"), buf); err != nil {
		return 0, 0, notFound(err)
	}
	if limit, err = readUint(f.file("pids", path, "pids.max"), buf); err != nil {
		return current, 0, nil // none set
	}
	if limit == Unlimited {
		limit = 0
	}
	return current, limit, nil
}

func notFound(err error) error {
	if err != nil && errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	return err
}

// bufSize holds the largest file read (a v2 memory.stat is about 1.5 KiB).
const bufSize = 8 << 10

func sized(buf []byte) []byte {
	if len(buf) < bufSize {
		return make([]byte, bufSize)
	}
	return buf
}

// ReadSmall reads the small file name (a cgroup or /proc file of a few KiB) into buf with
// three system calls and no allocation, and returns its bytes; a file longer than buf is cut
// at len(buf). A missing file is an error wrapping os.ErrNotExist. The sampler reads
// /proc/<pid>/net/dev through it too: one small-file reader for both.
func ReadSmall(name string, buf []byte) ([]byte, error) {
	fd, err := unix.Open(name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	defer unix.Close(fd)
	total := 0
	for total < len(buf) {
		n, err := unix.Read(fd, buf[total:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: name, Err: err}
		}
		if n == 0 {
			break
		}
		total += n
	}
	return buf[:total], nil
}

// readUint reads a file of one number; "max" (v2's no limit) reads as Unlimited.
func readUint(name string, buf []byte) (uint64, error) {
	b, err := ReadSmall(name, buf)
	if err != nil {
		return 0, err
	}
	b = bytes.TrimSpace(b)
	if string(b) == "max" {
		return Unlimited, nil
	}
	v, ok := parseUint(b)
	if !ok {
		return 0, fmt.Errorf("parse %s: %q is not a number", name, b)
	}
	return v, nil
}

// readKeys reads the "key value" lines of name (memory.stat, memory.events, cpu.stat) and
// returns the values of keys (at most three), in their order; 0 for a key absent.
func readKeys(name string, buf []byte, keys ...string) ([3]uint64, error) {
	var out [3]uint64
	b, err := ReadSmall(name, buf)
	if err != nil {
		return out, err
	}
	for line := range bytes.Lines(b) {
		k, v, ok := bytes.Cut(bytes.TrimSpace(line), []byte(" "))
		if !ok {
			continue
		}
		for i, want := range keys {
			if string(k) == want {
				out[i], _ = parseUint(bytes.TrimSpace(v))
			}
		}
	}
	return out, nil
}

func parseUint(b []byte) (uint64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if v > (math.MaxUint64-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	return v, true
}
