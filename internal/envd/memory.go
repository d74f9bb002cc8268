package envd

import (
	"bufio"
	"bytes"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// An idle envd hands memory back in two steps, each armed when the last request ends and
// skipped when a request is in flight when it fires; nothing runs while envd stays idle.
const (
	// trimAfter: the heap a burst of work left free goes back to the OS (the runtime's own
	// scavenger takes minutes).
	trimAfter = time.Second
	// dropMappingsAfter: envd's page-table mappings of the cove binary go too. Later than the
	// heap, because the first request after it maps back what it touches, about 0.3 ms of
	// minor faults here (go run ./bench/envd prints it); commands seconds apart never pay it.
	dropMappingsAfter = 10 * time.Second
)

// idleTrimmer counts requests in flight and runs the two steps when envd goes idle.
type idleTrimmer struct {
	inflight atomic.Int64
	trim     *time.Timer
	drop     *time.Timer
}

// newIdleTrimmer arms both steps at once: start-up's garbage and mappings count as a burst.
func newIdleTrimmer() *idleTrimmer {
	t := &idleTrimmer{}
	t.trim = time.AfterFunc(trimAfter, t.when(releaseHeap))
	t.drop = time.AfterFunc(dropMappingsAfter, t.when(dropExecutableMappings))
	return t
}

func (t *idleTrimmer) when(step func()) func() {
	return func() {
		if t.inflight.Load() == 0 {
			step()
		}
	}
}

func (t *idleTrimmer) begin() { t.inflight.Add(1) }

func (t *idleTrimmer) end() {
	if t.inflight.Add(-1) == 0 {
		t.trim.Reset(trimAfter)
		t.drop.Reset(dropMappingsAfter)
	}
}

// releaseHeap returns the free heap to the OS.
func releaseHeap() {
	runtime.GC() // twice: a sync.Pool's buffers survive one collection as its victim cache
	debug.FreeOSMemory()
}

// dropExecutableMappings drops envd's mappings of its own binary that are not writable.
//
// envd is the one cove binary, so at start every package's init runs, the server's included,
// and with the kernel's fault-around each touch maps 64 KiB of the file: about 15 MiB of code
// and read-only data resident in envd's page tables, most of which it never reads again.
// MADV_DONTNEED on a private, never-written file mapping only drops those page-table entries:
// the pages stay in the page cache, shared with the host and every other sandbox, and the
// next touch maps them back with a minor fault. Writable mappings (the data segment) are
// never touched: dropping them would lose their contents.
func dropExecutableMappings() {
	var self unix.Stat_t
	if err := unix.Stat("/proc/self/exe", &self); err != nil {
		return
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return
	}
	sc := bufio.NewScanner(bytes.NewReader(maps))
	for sc.Scan() {
		start, end, ok := readOnlyMappingOf(sc.Bytes(), self.Dev, self.Ino)
		if !ok {
			continue
		}
		// The raw call: the range is an address, not memory Go holds a slice of.
		_, _, _ = unix.Syscall(unix.SYS_MADVISE, start, end-start, unix.MADV_DONTNEED)
	}
}

// readOnlyMappingOf parses one /proc/self/maps line ("start-end perms offset dev inode path")
// and reports the range when it is a private mapping of the file (dev, ino) without write
// permission.
func readOnlyMappingOf(line []byte, dev, ino uint64) (start, end uintptr, ok bool) {
	f := bytes.Fields(line)
	if len(f) < 6 {
		return 0, 0, false
	}
	if perms := f[1]; len(perms) != 4 || perms[0] != 'r' || perms[1] != '-' || perms[3] != 'p' {
		return 0, 0, false
	}
	if n, err := strconv.ParseUint(string(f[4]), 10, 64); err != nil || n != ino {
		return 0, 0, false
	}
	major, minor, found := bytes.Cut(f[3], []byte(":"))
	if !found {
		return 0, 0, false
	}
	maj, err1 := strconv.ParseUint(string(major), 16, 32)
	mnr, err2 := strconv.ParseUint(string(minor), 16, 32)
	if err1 != nil || err2 != nil || unix.Mkdev(uint32(maj), uint32(mnr)) != dev {
		return 0, 0, false
	}
	lo, hi, found := bytes.Cut(f[0], []byte("-"))
	if !found {
		return 0, 0, false
	}
	s, err1 := strconv.ParseUint(string(lo), 16, 64)
	e, err2 := strconv.ParseUint(string(hi), 16, 64)
	if err1 != nil || err2 != nil || e <= s {
		return 0, 0, false
	}
	return uintptr(s), uintptr(e), true
}

// LeanRuntime tunes the Go runtime of a process whose whole job is envd: call it first.
//
//   - Go code runs on one core unless GOMAXPROCS says otherwise. envd relays; the sandbox's
//     cores are for the user's commands. With one P, handing a chunk or an exit from one
//     goroutine to another is a switch on the same thread rather than a futex wake-up of
//     another: `go run ./bench/envd` measured 0.56 s of envd CPU per GiB of stdout instead of
//     0.72 s, 0.54 ms of CPU per `true` instead of 0.66 ms, and 1.37 GiB/s instead of 1.13.
//   - Heap profiling is off: its sampled stacks are kept for the process's lifetime (1.4 MiB
//     of envd's idle memory after the benchmark), and nothing reads envd's heap profile.
func LeanRuntime() {
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
	runtime.MemProfileRate = 0
}
