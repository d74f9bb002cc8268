package envd

import (
	"bufio"
	"math"
	"os"
	"os/exec"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestReadOnlyMappingOf(t *testing.T) {
	dev := unix.Mkdev(0xfe, 0x01)
	cases := []struct {
		line string
		ok   bool
	}{
		{"00400000-00f22000 r-xp 00000000 fe:01 42 /usr/local/bin/cove", true},
		{"00f22000-01c80000 r--p 00b22000 fe:01 42 /usr/local/bin/cove", true},
		{"01c80000-01d18000 rw-p 0187f000 fe:01 42 /usr/local/bin/cove", false}, // data: writable
		{"00400000-00f22000 r-xs 00000000 fe:01 42 /usr/local/bin/cove", false}, // shared
		{"00400000-00f22000 r-xp 00000000 fe:01 43 /usr/lib/libc.so.6", false},  // another file
		{"00400000-00f22000 r-xp 00000000 fe:02 42 /other/fs/cove", false},      // another device
		{"7fff4886e000-7fff4888f000 rw-p 00000000 00:00 0 [stack]", false},
		{"garbage", false},
	}
	for _, c := range cases {
		start, end, ok := readOnlyMappingOf([]byte(c.line), dev, 42)
		if ok != c.ok {
			t.Errorf("%q: ok=%v, want %v", c.line, ok, c.ok)
		}
		if ok && (start != 0x400000 && start != 0xf22000 || end <= start) {
			t.Errorf("%q: range %#x-%#x", c.line, start, end)
		}
	}
}

// TestDropExecutableMappings drops this test binary's own mappings: its file-backed RSS
// falls, and the code keeps running (the pages map back on the next touch).
func TestDropExecutableMappings(t *testing.T) {
	before := rssFileKiB(t)
	dropExecutableMappings()
	after := rssFileKiB(t)
	t.Logf("RssFile %d KiB -> %d KiB", before, after)
	if after >= before {
		t.Fatalf("RssFile did not fall: %d KiB -> %d KiB", before, after)
	}
	if got := strconv.Itoa(12345); got != "12345" { // code and read-only data still work
		t.Fatal(got)
	}
}

func rssFileKiB(t *testing.T) int {
	t.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "RssFile:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Skip("no RssFile in /proc/self/status")
	return 0
}

// alone reports whether the test runs in a child of this test binary started for it alone,
// and when it does not, starts that child and reports its result. The collector switch is
// process-wide: in the parent other tests' servers flip it (their idle trimmers) and
// allocate meanwhile, which failed these tests under CI.
func alone(t *testing.T) bool {
	t.Helper()
	if os.Getenv("COVE_TEST_ALONE") == t.Name() {
		return true
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), "COVE_TEST_ALONE="+t.Name())
	out, err := cmd.CombinedOutput()
	t.Logf("alone in its own process:\n%s", out)
	if err != nil {
		t.Errorf("in its own process: %v", err)
	} else if !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Errorf("in its own process, the test did not run")
	}
	return false
}

// TestIdleTrimmerTurnsTheCollectorOffWhileDroppedAndBackOnForARequest: once the mappings are
// dropped the collector is off (its forced two-minute cycle would map its code back), and
// the next request turns it on again.
func TestIdleTrimmerTurnsTheCollectorOffWhileDroppedAndBackOnForARequest(t *testing.T) {
	if !alone(t) {
		return
	}
	gogc := func() uint64 {
		s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
		metrics.Read(s)
		return s[0].Value.Uint64()
	}
	before := gogc()
	tr := newIdleTrimmer(10*time.Millisecond, 30*time.Millisecond)
	deadline := time.Now().Add(5 * time.Second)
	for !collector.isOff.Load() {
		if time.Now().After(deadline) {
			t.Fatal("the collector was never turned off")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := gogc(); got != math.MaxUint64 {
		t.Errorf("GOGC while dropped = %d, want off (MaxUint64 here)", got)
	}
	tr.begin()
	if collector.isOff.Load() || gogc() != before {
		t.Errorf("after a request began: off=%v GOGC=%d, want on and %d", collector.isOff.Load(), gogc(), before)
	}
	tr.end()
	tr.trim.Stop()
	tr.drop.Stop()
	collector.on()
}

// TestCollectorOffStillCollectsAtItsLimit: with the collector off, a long stream of garbage
// (a command's output read while no client is attached) is collected at the memory limit
// rather than kept. The runtime's memory counts every goroutine's garbage, so it runs alone.
func TestCollectorOffStillCollectsAtItsLimit(t *testing.T) {
	if !alone(t) {
		return
	}
	read := func() (cycles, inUse uint64) {
		s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}, {Name: "/memory/classes/total:bytes"},
			{Name: "/memory/classes/heap/released:bytes"}}
		metrics.Read(s)
		return s[0].Value.Uint64(), s[1].Value.Uint64() - s[2].Value.Uint64()
	}
	runtime.GC()
	collector.off()
	defer collector.on()
	cycles0, inUse0 := read()
	const chunk, garbage = 128 << 10, 512 << 20
	var sink []byte
	for range garbage / chunk {
		sink = make([]byte, chunk)
		sink[0] = 1
	}
	_ = sink
	cycles, inUse := read()
	t.Logf("%d collections; runtime memory %d -> %d MiB", cycles-cycles0, inUse0>>20, inUse>>20)
	if cycles == cycles0 {
		t.Error("no collection while the collector was off: the limit did not act")
	}
	// Without the limit all of it is kept. With it, memory stays near the limit (16 MiB over
	// the start, 20-22 MiB seen) when the collector's worker gets a core, and overshoots
	// while it waits for one: 87 MiB with the whole suite running beside it.
	if inUse > inUse0+garbage/2 {
		t.Errorf("runtime memory grew from %d to %d MiB with the collector off: the garbage was kept", inUse0>>20, inUse>>20)
	}
}
