package envd

import (
	"bufio"
	"bytes"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"sync"
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
	// heap, because the first request after it maps back what it touches; commands seconds
	// apart never pay it. After 12 s idle the first command's p50 was 3.32 ms with the drop
	// and 3.26 ms without (go run ./bench/envd prints the first round trip after idle).
	dropMappingsAfter = 10 * time.Second
)

// idleTrimmer counts requests in flight and runs the two steps when envd goes idle.
type idleTrimmer struct {
	trimAfter, dropAfter time.Duration

	inflight atomic.Int64
	lastEnd  atomic.Int64 // when the last request ended, in Unix nanoseconds
	dirty    atomic.Bool  // work ran since the heap was last trimmed
	trim     *time.Timer
	drop     *time.Timer
}

// newIdleTrimmer arms both steps at once: start-up's garbage and mappings count as a burst.
// envd passes trimAfter and dropMappingsAfter.
func newIdleTrimmer(trimAfter, dropAfter time.Duration) *idleTrimmer {
	t := &idleTrimmer{trimAfter: trimAfter, dropAfter: dropAfter}
	t.dirty.Store(true) // start-up
	t.trim = time.AfterFunc(trimAfter, t.when(func() { t.dirty.Store(false); releaseHeap() }))
	t.drop = time.AfterFunc(dropAfter, t.when(t.dropMappings))
	return t
}

// dropMappings trims the heap, turns the collector off, and drops the mappings. The order
// matters: a collection after the drop would map the collector's code back, and the runtime
// forces one every two minutes while it is on. An idle envd allocates nothing (and a memory
// limit bounds what a command running without a stream makes it allocate); the next request
// turns the collector back on.
func (t *idleTrimmer) dropMappings() {
	if t.dirty.Swap(false) { // else the trim step did it, and nothing ran since
		releaseHeap()
	}
	collector.off()
	if t.inflight.Load() != 0 { // a request came in meanwhile: begin may have missed it
		collector.on()
		return
	}
	dropExecutableMappings()
}

func (t *idleTrimmer) when(step func()) func() {
	return func() {
		if t.inflight.Load() == 0 {
			step()
		}
	}
}

func (t *idleTrimmer) begin() {
	t.inflight.Add(1)
	collector.on()
}

func (t *idleTrimmer) end() {
	t.lastEnd.Store(time.Now().UnixNano())
	t.dirty.Store(true)
	if t.inflight.Add(-1) == 0 {
		t.trim.Reset(t.trimAfter)
		t.drop.Reset(t.dropAfter)
	}
}

// afterWork re-arms the drop after envd did work of its own while idle (kept end events
// expiring): that work mapped code back and freed memory. The mappings still go no sooner
// than dropMappingsAfter after the last request.
func (t *idleTrimmer) afterWork() {
	t.dirty.Store(true)
	if t.inflight.Load() != 0 {
		return // the end of the last request re-arms them
	}
	sinceRequest := time.Since(time.Unix(0, t.lastEnd.Load()))
	t.drop.Reset(max(t.dropAfter-sinceRequest, t.trimAfter)) // the drop trims the heap first
}

// collector is the process's garbage collector switch (the setting is process-wide, and a
// test binary runs many envd servers).
var collector gcSwitch

type gcSwitch struct {
	mu      sync.Mutex
	isOff   atomic.Bool
	percent int   // the collector's setting before off
	limit   int64 // the memory limit before off
}

// offHeadroom is how much more memory the runtime may take while the collector is off before
// it collects anyway: a command left running without a stream still has its output read.
const offHeadroom = 16 << 20

// off turns the collector off, with a memory limit as the backstop: GOGC=off with a limit
// collects only when the limit is near (and never on the two-minute timer).
func (g *gcSwitch) off() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.isOff.Load() {
		s := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
		metrics.Read(s)
		inUse := int64(s[0].Value.Uint64() - s[1].Value.Uint64())
		g.limit = debug.SetMemoryLimit(inUse + offHeadroom)
		g.percent = debug.SetGCPercent(-1)
		g.isOff.Store(true)
	}
}

// on restores the setting off found; it does nothing unless off turned the collector off.
func (g *gcSwitch) on() {
	if !g.isOff.Load() {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.isOff.Load() {
		debug.SetGCPercent(g.percent)
		debug.SetMemoryLimit(g.limit)
		g.isOff.Store(false)
	}
}

// releaseHeap returns the free heap to the OS.
func releaseHeap() {
	purgeGoroutineStacks()
	runtime.GC() // twice: a sync.Pool's buffers survive one collection as its victim cache
	debug.FreeOSMemory()
}

// purgeGoroutineStacks hands the stacks of exited goroutines to the collector. The runtime
// keeps up to 64 exited goroutines with their 8 KiB stacks on each processor for reuse, and
// frees only the stacks on its global list; resizing to one processor moves the others'
// lists there. The default (the runtime's own choice, which follows the CPU limit) is then
// restored. After 200 concurrent commands this gave back about 0.5 MiB.
func purgeGoroutineStacks() {
	if runtime.GOMAXPROCS(0) > 1 && os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
		runtime.SetDefaultGOMAXPROCS()
	}
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
	maj, mnr, ok := hexPair(f[3], ':')
	if !ok || unix.Mkdev(uint32(maj), uint32(mnr)) != dev {
		return 0, 0, false
	}
	s, e, ok := hexPair(f[0], '-')
	if !ok || e <= s {
		return 0, 0, false
	}
	return uintptr(s), uintptr(e), true
}

// LeanRuntime tunes the Go runtime of a process whose whole job is envd: call it first.
// Heap profiling is off: its sampled stacks are kept for the process's lifetime (1.4 MiB of
// envd's idle memory after `go run ./bench/envd`), and nothing reads envd's heap profile.
//
// GOMAXPROCS stays the runtime's choice. One P was measured: less CPU per command (0.44 ms
// instead of 0.55) and 1.37 GiB/s of stdout instead of 1.24, but while a gzip download ran
// through /files, a `true` round trip took 33 ms at p50 instead of 1.4 ms, every goroutine
// hand-off waiting for the compressor's time slice to end.
func LeanRuntime() {
	runtime.MemProfileRate = 0
}

// hexPair parses "a<sep>b", two hexadecimal numbers.
func hexPair(b []byte, sep byte) (a, c uint64, ok bool) {
	x, y, found := bytes.Cut(b, []byte{sep})
	if !found {
		return 0, 0, false
	}
	a, err1 := strconv.ParseUint(string(x), 16, 64)
	c, err2 := strconv.ParseUint(string(y), 16, 64)
	return a, c, err1 == nil && err2 == nil
}
