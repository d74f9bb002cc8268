package envd

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"

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
