package sampler

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/sandbox/runtime"
	"github.com/cove-dev/cove/internal/sandbox/runtime/runtimetest"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/store/sqlite"
)

func TestMain(m *testing.M) {
	code := m.Run()
	runtimetest.Cleanup()
	os.Exit(code)
}

type sources []Target

func (s sources) Live() []Target { return s }

func openStore(t testing.TB) *sqlite.DB {
	t.Helper()
	db, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "cove.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// lines collects a sandbox stream and lets a test wait for a line.
type lines struct {
	mu   sync.Mutex
	seen map[string]bool
	more chan struct{}
}

func collect(r io.Reader) *lines {
	l := &lines{seen: map[string]bool{}, more: make(chan struct{}, 1)}
	go func() {
		s := bufio.NewScanner(r)
		for s.Scan() {
			l.mu.Lock()
			l.seen[strings.TrimSpace(s.Text())] = true
			l.mu.Unlock()
			select {
			case l.more <- struct{}{}:
			default:
			}
		}
	}()
	return l
}

func (l *lines) waitFor(t testing.TB, line string) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		l.mu.Lock()
		ok := l.seen[line]
		l.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-l.more:
		case <-deadline:
			t.Fatalf("sandbox never printed %q", line)
		}
	}
}

// sandbox is a real runc sandbox running script, and its Target.
type sandbox struct {
	target Target
	root   string // the overlay's merged root, as the host sees it
	stdout *lines
}

// startSandbox runs script in a busybox sandbox with one core and 128 MiB, or skips the
// test without root and runc.
func startSandbox(t testing.TB, script string) *sandbox {
	t.Helper()
	r, rootfs := runtimetest.Runc(t), runtimetest.BusyboxRootfs(t)
	b := make([]byte, 4)
	rand.Read(b)
	id := "sampler-" + hex.EncodeToString(b)
	ctx := context.Background()
	sb, err := r.Create(ctx, runtime.Spec{ID: id, Rootfs: rootfs, Args: []string{"/bin/sh", "-c", script},
		Limits: runtime.Limits{MemoryBytes: 128 << 20, CPUs: 1, PIDs: 64}})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() {
		if err := r.Destroy(context.Background(), id); err != nil {
			t.Errorf("destroy: %v", err)
		}
	})
	go io.Copy(io.Discard, sb.Stderr)
	out := collect(sb.Stdout)
	if err := r.Start(ctx, id); err != nil {
		t.Fatalf("start: %v", err)
	}
	root := overlayRoot(t, id)
	return &sandbox{
		target: Target{ID: id, TeamID: "team-a", CPUCount: 1, DiskTotal: 1 << 30,
			CgroupPath: r.CgroupPath(id), NetnsPath: r.NetnsPath(id), UpperDir: filepath.Join(filepath.Dir(root), "upper")},
		root:   root,
		stdout: out,
	}
}

// overlayRoot finds the sandbox's overlay mount (<data>/<id>/rootfs), which runtime does not
// export, in the mount table.
func overlayRoot(t testing.TB, id string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) > 4 && strings.HasSuffix(f[4], "/"+id+"/rootfs") {
			return f[4]
		}
	}
	t.Fatalf("no overlay mount for %s", id)
	return ""
}

// next lets the sandbox's script past `gate name`.
func (s *sandbox) next(t testing.TB, name string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(s.root, "root", name), nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

const phases = `gate() { while [ ! -e /root/$1 ]; do usleep 20000; done; }
echo ready
gate cpu
end=$(( $(date +%s) + 2 )); while [ $(date +%s) -lt $end ]; do :; done
echo cpu-done
gate disk
dd if=/dev/zero of=/root/big bs=1M count=20 2>/dev/null; sync
echo disk-done
gate net
httpd -p 127.0.0.1:8080 -h /bin && wget -q -O /dev/null http://127.0.0.1:8080/busybox
echo net-done
sleep 1000
`

func TestSampleRealSandbox(t *testing.T) {
	sb := startSandbox(t, phases)
	db := openStore(t)
	s, err := New(Config{Source: sources{sb.target}, Store: db, DiskEvery: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sb.stdout.waitFor(t, "ready")
	tick := func() store.MetricSample {
		t.Helper()
		if err := s.Tick(ctx); err != nil {
			t.Fatal(err)
		}
		got, err := db.LatestSamples(ctx, "team-a", []string{sb.target.ID})
		if err != nil || len(got) != 1 {
			t.Fatalf("stored samples: %v, %v", got, err)
		}
		return got[0]
	}
	first := tick()

	t.Run("memory is the sandbox's, under its limit", func(t *testing.T) {
		if first.MemUsed == 0 || first.MemTotal != 128<<20 || first.CPUCount != 1 || first.DiskTotal != 1<<30 {
			t.Errorf("first sample %+v", first)
		}
	})

	t.Run("a busy loop shows as CPU use", func(t *testing.T) {
		sb.next(t, "cpu")
		sb.stdout.waitFor(t, "cpu-done")
		got := tick()
		if got.CPUUsedPct < 20 || got.CPUUsedPct > 100 {
			t.Errorf("cpuUsedPct %.2f after a 2 s busy loop on 1 core", got.CPUUsedPct)
		}
		t.Logf("cpu %.2f%% mem used %d cache %d", got.CPUUsedPct, got.MemUsed, got.MemCache)
	})

	t.Run("writing 20 MB into the root grows disk use by 20 MB", func(t *testing.T) {
		sb.next(t, "disk")
		sb.stdout.waitFor(t, "disk-done")
		got := tick()
		if grew := int64(got.DiskUsed) - int64(first.DiskUsed); grew < 20<<20 || grew > 21<<20 {
			t.Errorf("disk used %d -> %d: grew %d, want 20 MiB", first.DiskUsed, got.DiskUsed, grew)
		}
	})

	t.Run("loopback traffic shows in the network counters", func(t *testing.T) {
		sb.next(t, "net")
		sb.stdout.waitFor(t, "net-done")
		got := tick()
		size := uint64(fileSize(t, "/bin/busybox"))
		if got.NetRxBytes < size || got.NetTxBytes < size || got.NetRxPackets < 10 || got.NetTxPackets < 10 ||
			got.NetRxBytes-first.NetRxBytes < size {
			t.Errorf("net counters %+v after fetching %d bytes over loopback", got, size)
		}
	})

	t.Run("a stopped sampler's Run returns", func(t *testing.T) {
		s, err := New(Config{Source: sources{sb.target}, Store: db, Interval: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		ran := make(chan error, 1)
		go func() { ran <- s.Run(ctx) }()
		time.Sleep(100 * time.Millisecond)
		s.Close()
		if err := <-ran; err != nil {
			t.Fatal(err)
		}
		all, _ := db.QuerySamples(ctx, sb.target.ID, time.Time{}, time.Time{})
		if len(all) < 4+3 {
			t.Errorf("%d samples stored, want the 4 ticks and at least 3 of Run", len(all))
		}
	})
}

func fileSize(t testing.TB, name string) int64 {
	fi, err := os.Stat(name)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

func TestTick(t *testing.T) {
	t.Parallel()
	db := openStore(t)
	gone := Target{ID: "gone", TeamID: "team-a", CgroupPath: "/cove-test/does-not-exist"}

	t.Run("a sandbox that vanished is skipped without failing the tick", func(t *testing.T) {
		s, _ := New(Config{Source: sources{gone}, Store: db})
		if err := s.Tick(context.Background()); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Sample(gone); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("Sample of a vanished sandbox: %v", err)
		}
	})

	t.Run("a config without a source or store is refused", func(t *testing.T) {
		if _, err := New(Config{Store: db}); err == nil {
			t.Error("New without a source succeeded")
		}
	})
}

func TestParseNetDev(t *testing.T) {
	t.Parallel()
	const dev = `Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo: 2100385    1445    0    0    0     0          0         0  2100385    1445    0    0    0     0       0          0
  eth0:1000 10 0 0 0 0 0 0 500 5 0 0 0 0 0 0
`
	want := netStats{rxBytes: 2101385, rxPackets: 1455, txBytes: 2100885, txPackets: 1450}
	if got := parseNetDev([]byte(dev)); got != want {
		t.Errorf("parseNetDev = %+v, want %+v", got, want)
	}
}

func TestDiskUsage(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for i := range 10 {
		if err := os.WriteFile(filepath.Join(dir, hex.EncodeToString([]byte{byte(i)})), make([]byte, 64<<10), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("a walk counts the blocks of every file", func(t *testing.T) {
		used, complete, err := diskUsage(dir, 1000)
		if err != nil || !complete || used < 10*64<<10 {
			t.Errorf("diskUsage = %d, %v, %v", used, complete, err)
		}
	})
	t.Run("a walk stops at its cap and says so", func(t *testing.T) {
		used, complete, err := diskUsage(dir, 4)
		if err != nil || complete || used > 4*(64<<10+4096) {
			t.Errorf("capped diskUsage = %d, %v, %v", used, complete, err)
		}
	})
	t.Run("a missing dir is not-exist", func(t *testing.T) {
		if _, _, err := diskUsage(filepath.Join(dir, "nope"), 10); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("missing dir: %v", err)
		}
	})
}

// BenchmarkSampleOne measures one sample of an idle real sandbox: four cgroup reads, the
// network namespace round trip and, every DiskEvery-th time, the upper dir walk.
func BenchmarkSampleOne(b *testing.B) {
	sb := startSandbox(b, "echo ready; sleep 1000")
	sb.stdout.waitFor(b, "ready")
	for _, bc := range []struct {
		name   string
		every  int
		target Target
	}{
		{"cgroup only", 1 << 30, Target{ID: sb.target.ID, CPUCount: 1, CgroupPath: sb.target.CgroupPath}},
		{"cgroup and network", 1 << 30, Target{ID: sb.target.ID, CPUCount: 1, CgroupPath: sb.target.CgroupPath, NetnsPath: sb.target.NetnsPath}},
		{"everything, walk every sample", 1, sb.target},
		{"everything, walk every 6th (default)", DefaultDiskEvery, sb.target},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s, err := New(Config{Source: sources{}, Store: openStore(b), DiskEvery: bc.every})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.Sample(bc.target); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDiskUsage measures the upper dir walk per entry, on /usr/lib.
func BenchmarkDiskUsage(b *testing.B) {
	_, _, _ = diskUsage("/usr/lib", DefaultDiskMaxEntries)
	entries := 0
	filepath.WalkDir("/usr/lib", func(string, os.DirEntry, error) error { entries++; return nil })
	for b.Loop() {
		if _, _, err := diskUsage("/usr/lib", DefaultDiskMaxEntries); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(min(entries, DefaultDiskMaxEntries)), "entries/op")
}
