package logs

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/store/sqlite"
)

func newDB(t testing.TB) *sqlite.DB {
	t.Helper()
	db, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "cove.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// clock is a fake clock for the rate limits.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// syncBuffer is a log sink tests read while the ingester writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

var base = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func count(t *testing.T, db *sqlite.DB, team, sandbox string) int {
	t.Helper()
	n := 0
	q := store.LogQuery{TeamID: team, SandboxID: sandbox}
	for {
		page, err := db.QueryLogs(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		n += len(page.Lines)
		if page.Next == nil {
			return n
		}
		q.After = page.Next
	}
}

func TestIngester(t *testing.T) {
	t.Parallel()

	t.Run("close flushes every queued line", func(t *testing.T) {
		t.Parallel()
		db := newDB(t)
		in := NewIngester(db, Config{FlushInterval: time.Hour, BatchSize: 100000})
		for i := range 1500 {
			in.Add(store.LogLine{SandboxID: "sb", TeamID: "team", Source: store.SourceEnvd, Message: fmt.Sprint("line ", i)})
		}
		if err := in.Close(); err != nil {
			t.Fatal(err)
		}
		if n := count(t, db, "team", "sb"); n != 1500 {
			t.Errorf("%d lines stored, want 1500", n)
		}
		in.Add(store.LogLine{SandboxID: "sb", TeamID: "team", Message: "late"})
		if in.Dropped("sb") != 1 {
			t.Errorf("a line after Close: dropped %d, want 1", in.Dropped("sb"))
		}
	})

	t.Run("the flush interval writes lines without a close", func(t *testing.T) {
		t.Parallel()
		db := newDB(t)
		in := NewIngester(db, Config{FlushInterval: 20 * time.Millisecond})
		t.Cleanup(func() { in.Close() })
		in.Add(store.LogLine{SandboxID: "sb", TeamID: "team", Message: "hello"})
		deadline := time.Now().Add(5 * time.Second)
		for count(t, db, "team", "sb") != 1 {
			if time.Now().After(deadline) {
				t.Fatal("line not written within 5 s")
			}
			time.Sleep(10 * time.Millisecond)
		}
	})

	t.Run("the line rate cap drops and counts, once per sandbox per minute in the log", func(t *testing.T) {
		t.Parallel()
		db := newDB(t)
		clk := &clock{t: base}
		var logs syncBuffer
		in := NewIngester(db, Config{MaxLinesPerSecPerSandbox: 100, FlushInterval: time.Hour, Now: clk.Now,
			Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
		for i := range 250 { // burst of 100, then nothing refills: the clock stands still
			in.Add(store.LogLine{SandboxID: "noisy", TeamID: "team", Message: fmt.Sprint(i)})
		}
		in.Add(store.LogLine{SandboxID: "quiet", TeamID: "team", Message: "fine"})
		clk.Add(500 * time.Millisecond) // refills 50
		for range 60 {
			in.Add(store.LogLine{SandboxID: "noisy", TeamID: "team", Message: "more"})
		}
		if got := in.Dropped("noisy"); got != 160 {
			t.Errorf("noisy dropped %d, want 160", got)
		}
		if got := in.Dropped("quiet"); got != 0 {
			t.Errorf("quiet dropped %d, want 0", got)
		}
		if err := in.Close(); err != nil {
			t.Fatal(err)
		}
		if n := count(t, db, "team", "noisy"); n != 150 {
			t.Errorf("noisy stored %d, want 150", n)
		}
		if n := strings.Count(logs.String(), `"msg":"log lines dropped"`); n != 1 {
			t.Errorf("%d drop reports, want 1:\n%s", n, logs.String())
		}
		for _, want := range []string{`"sandbox.id":"noisy"`, `"dropped.total":160`, `"dropped.rate":160`} {
			if !strings.Contains(logs.String(), want) {
				t.Errorf("drop report lacks %s:\n%s", want, logs.String())
			}
		}
	})

	t.Run("lines envd dropped join the host's in the one drop report and on /metrics", func(t *testing.T) {
		db := newDB(t)
		clk := &clock{t: base}
		var logs syncBuffer
		in := NewIngester(db, Config{MaxLinesPerSecPerSandbox: 10, FlushInterval: time.Hour, Now: clk.Now,
			Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
		metric := telemetry.LogLinesDropped.WithLabelValues("envd")
		before, bytesBefore := counterValue(t, metric), counterValue(t, telemetry.LogBytesDropped)
		for i := range 15 {
			in.Add(store.LogLine{SandboxID: "envd-drops", TeamID: "team", Message: fmt.Sprint(i)})
		}
		in.DroppedInSandbox("envd-drops", "team", 1000, 1<<20)
		in.DroppedInSandbox("envd-drops", "team", 0, 0)
		if got := in.Dropped("envd-drops"); got != 1005 {
			t.Errorf("dropped %d, want 1005 (5 by the host's rate, 1000 by envd)", got)
		}
		if err := in.Close(); err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(logs.String(), `"msg":"log lines dropped"`); n != 1 {
			t.Errorf("%d drop reports, want 1:\n%s", n, logs.String())
		}
		for _, want := range []string{`"dropped.total":1005`, `"dropped.rate":5`, `"dropped.envd":1000`} {
			if !strings.Contains(logs.String(), want) {
				t.Errorf("drop report lacks %s:\n%s", want, logs.String())
			}
		}
		if d := counterValue(t, metric) - before; d != 1000 {
			t.Errorf("cove_log_lines_dropped_total{reason=envd} grew by %v, want 1000", d)
		}
		if d := counterValue(t, telemetry.LogBytesDropped) - bytesBefore; d != 1<<20 {
			t.Errorf("cove_log_bytes_dropped_total grew by %v, want 1 MiB", d)
		}
	})

	t.Run("the byte budget drops lines until the next minute", func(t *testing.T) {
		t.Parallel()
		db := newDB(t)
		clk := &clock{t: base}
		in := NewIngester(db, Config{MaxLinesPerSecPerSandbox: -1, MaxBytesPerMinutePerSandbox: 100, Now: clk.Now})
		for range 15 {
			in.Add(store.LogLine{SandboxID: "sb", TeamID: "team", Message: "0123456789"})
		}
		clk.Add(time.Minute)
		in.Add(store.LogLine{SandboxID: "sb", TeamID: "team", Message: "0123456789"})
		if got := in.Dropped("sb"); got != 5 {
			t.Errorf("dropped %d, want 5", got)
		}
		in.Close()
		if n := count(t, db, "team", "sb"); n != 11 {
			t.Errorf("stored %d, want 11", n)
		}
	})

	t.Run("a full queue drops instead of blocking", func(t *testing.T) {
		t.Parallel()
		db := newDB(t)
		in := NewIngester(db, Config{MaxLinesPerSecPerSandbox: -1, QueueSize: 10, SandboxQueueSize: 10, BatchSize: 1000, FlushInterval: time.Hour})
		for range 25 {
			in.Add(store.LogLine{SandboxID: "sb", TeamID: "team", Message: "x"})
		}
		if got := in.Dropped("sb"); got != 15 {
			t.Errorf("dropped %d, want 15", got)
		}
		in.Close()
	})
}

func TestParseJSONLine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in string
		ok       bool
		want     store.LogLine
	}{
		{"a slog line gives its time, level, message, request and pid", `{"time":"2026-03-01T12:00:00Z","level":"WARN","msg":"stream end","request_id":"r1","process.pid":7,"stream.end":"deadline"}`,
			true, store.LogLine{Time: base, Level: "warn", Message: "stream end", RequestID: "r1", PID: 7,
				Fields: map[string]any{"stream.end": "deadline"}}},
		{"plain text is not JSON", `hello`, false, store.LogLine{}},
		{"a JSON array is not a line", `[1]`, false, store.LogLine{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := ParseJSONLine([]byte(tc.in))
			if ok != tc.ok || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v, %v; want %+v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

// counterValue reads a counter's value.
func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// stalledDisk is a log store whose writes wait until released: a disk that stopped.
type stalledDisk struct {
	store.LogStore
	writing chan struct{} // closed at the first write
	once    sync.Once
	release chan struct{}
}

func (d *stalledDisk) InsertLogs(ctx context.Context, lines []store.LogLine) error {
	d.once.Do(func() { close(d.writing) })
	<-d.release
	return d.LogStore.InsertLogs(ctx, lines)
}

func TestAStalledDiskDropsAndCountsInsteadOfBlockingAdd(t *testing.T) {
	db := newDB(t)
	disk := &stalledDisk{LogStore: db, writing: make(chan struct{}), release: make(chan struct{})}
	var logs syncBuffer
	in := NewIngester(disk, Config{MaxLinesPerSecPerSandbox: -1, MaxBytesPerMinutePerSandbox: -1, BatchSize: 10, QueueSize: 100, SandboxQueueSize: 100, FlushInterval: time.Hour,
		Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	in.Add(store.LogLine{SandboxID: "sb", TeamID: "team", Message: "first"}) // not yet a batch
	for i := range 9 {
		in.Add(store.LogLine{SandboxID: "sb", TeamID: "team", Message: fmt.Sprint("batch ", i)})
	}
	<-disk.writing // the writer holds the first batch and waits on the disk
	added := make(chan struct{})
	go func() {
		defer close(added)
		for i := range 1000 {
			in.Add(store.LogLine{SandboxID: "sb", TeamID: "team", Message: fmt.Sprint("more ", i)})
		}
	}()
	select {
	case <-added:
	case <-time.After(30 * time.Second):
		t.Fatal("Add blocked behind a stalled disk")
	}
	if got := in.Dropped("sb"); got != 900 {
		t.Errorf("dropped %d, want 900: the queue holds 100 of the 1000 lines added during the stall", got)
	}
	close(disk.release)
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	if n := count(t, db, "team", "sb"); n != 110 {
		t.Errorf("stored %d, want the first batch and the 100 queued", n)
	}
	if !strings.Contains(logs.String(), `"dropped.backlog":900`) {
		t.Errorf("no drop report for the backlog:\n%s", logs.String())
	}
}

func TestANoisySandboxCannotTakeTheWholeQueue(t *testing.T) {
	db := newDB(t)
	disk := &stalledDisk{LogStore: db, writing: make(chan struct{}), release: make(chan struct{})}
	in := NewIngester(disk, Config{MaxLinesPerSecPerSandbox: -1, MaxBytesPerMinutePerSandbox: -1, BatchSize: 1, QueueSize: 100,
		SandboxQueueSize: 30, FlushInterval: time.Hour})
	in.Add(store.LogLine{SandboxID: "noisy", TeamID: "team", Message: "first"}) // a batch: the writer takes it and stalls
	<-disk.writing
	for i := range 500 {
		in.Add(store.LogLine{SandboxID: "noisy", TeamID: "team", Message: fmt.Sprint("noise ", i)})
	}
	for i := range 20 {
		in.Add(store.LogLine{SandboxID: "quiet", TeamID: "team", Message: fmt.Sprint("fine ", i)})
	}
	if got := in.Dropped("noisy"); got != 470 {
		t.Errorf("noisy dropped %d, want 470 past its 30 queued", got)
	}
	if got := in.Dropped("quiet"); got != 0 {
		t.Errorf("quiet dropped %d: the noisy sandbox took its room", got)
	}
	close(disk.release)
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	if n, q := count(t, db, "team", "noisy"), count(t, db, "team", "quiet"); n != 31 || q != 20 {
		t.Errorf("stored noisy %d quiet %d, want 31 and 20", n, q)
	}
}
