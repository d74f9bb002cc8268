package logs

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/store/sqlite"
)

var benchWords = strings.Fields(`connecting to database request handled error timeout user file opened
	closed retry cache miss hit build step npm install package warning deprecated compile python import
	module failed success listening port GET POST 200 404 500 latency ms worker started finished`)

func benchLine(r *rand.Rand, sandbox int, at time.Time) store.LogLine {
	var b strings.Builder
	for i := range 6 + r.Intn(10) {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(benchWords[r.Intn(len(benchWords))])
	}
	fmt.Fprintf(&b, " id=%d", r.Intn(1_000_000))
	levels := []string{"debug", "info", "info", "info", "warn", "error"}
	// A sandbox's output comes from a few commands, each started by one request.
	pid := 100 + r.Intn(5)
	return store.LogLine{Time: at, SandboxID: fmt.Sprintf("sb%02d", sandbox), TeamID: "team", TemplateID: "base",
		Level: levels[r.Intn(len(levels))], Source: store.SourceProcess, Stream: "stdout", PID: pid,
		RequestID: fmt.Sprintf("req_%02d_%d", sandbox, pid), Message: b.String(),
		Fields: map[string]any{"taskId": fmt.Sprintf("t%d", r.Intn(50))}}
}

// BenchmarkIngest measures lines per second through an Ingester into SQLite, from Add to
// committed, across 50 sandboxes with the rate caps off. Every line has JSON fields.
func BenchmarkIngest(b *testing.B) {
	db := newDB(b)
	r := rand.New(rand.NewSource(1))
	lines := make([]store.LogLine, 10_000)
	for i := range lines {
		lines[i] = benchLine(r, i%50, time.Time{}) // stamped by Add
	}
	in := NewIngester(db, Config{MaxLinesPerSecPerSandbox: -1, MaxBytesPerMinutePerSandbox: -1, QueueSize: b.N + 1})
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		in.Add(lines[i%len(lines)])
	}
	if err := in.Close(); err != nil {
		b.Fatal(err)
	}
	el := time.Since(start)
	var dropped uint64
	for i := range 50 {
		dropped += in.Dropped(fmt.Sprintf("sb%02d", i))
	}
	b.ReportMetric(float64(b.N)/el.Seconds(), "lines/s")
	b.ReportMetric(float64(dropped), "dropped")
}

// BenchmarkIngest20Sandboxes measures lines per second stored while 20 sandboxes add lines
// at once, each from its own goroutine as each collector does, with the default bounded
// queue: what the queue cannot hold is dropped and reported, never waited for.
func BenchmarkIngest20Sandboxes(b *testing.B) {
	db := newDB(b)
	const sandboxes = 20
	per := make([][]store.LogLine, sandboxes)
	for s := range per {
		r := rand.New(rand.NewSource(int64(s)))
		for range 2000 {
			per[s] = append(per[s], benchLine(r, s, time.Time{}))
		}
	}
	in := NewIngester(db, Config{MaxLinesPerSecPerSandbox: -1, MaxBytesPerMinutePerSandbox: -1})
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for s := range sandboxes {
		wg.Go(func() {
			for i := s; i < b.N; i += sandboxes {
				in.Add(per[s][i%len(per[s])])
			}
		})
	}
	wg.Wait()
	if err := in.Close(); err != nil {
		b.Fatal(err)
	}
	el := time.Since(start)
	b.StopTimer()
	var dropped uint64
	stored := 0
	for s := range sandboxes {
		id := fmt.Sprintf("sb%02d", s)
		dropped += in.Dropped(id)
		for q := (store.LogQuery{TeamID: "team", SandboxID: id, Limit: 1000}); ; {
			page, err := db.QueryLogs(context.Background(), q)
			if err != nil {
				b.Fatal(err)
			}
			stored += len(page.Lines)
			if page.Next == nil {
				break
			}
			q.After = page.Next
		}
	}
	if uint64(stored)+dropped != uint64(b.N) {
		b.Errorf("%d stored + %d dropped != %d added", stored, dropped, b.N)
	}
	b.ReportMetric(float64(stored)/el.Seconds(), "stored-lines/s")
	b.ReportMetric(float64(dropped), "dropped")
}

// searchDataVersion names the cached 1M-line file; change it when the schema or data do.
const searchDataVersion = "v5-filters"

// BenchmarkSearch1M loads 1M lines over 10 sandboxes (100k each) once, into a file kept in
// os.TempDir, and measures queries of one sandbox: searches for common, rare and absent
// words, with and without other filters, forward and backward.
func BenchmarkSearch1M(b *testing.B) { benchSearch(b, 1_000_000, "") }

// BenchmarkSearch10M is BenchmarkSearch1M over 10M lines (1M per sandbox), in a file of its
// own; loading it the first time takes minutes and a few GB of os.TempDir.
func BenchmarkSearch10M(b *testing.B) { benchSearch(b, 10_000_000, "-10m") }

func benchSearch(b *testing.B, total int, suffix string) {
	ctx := context.Background()
	path := filepath.Join(os.TempDir(), "cove-logs-bench-"+searchDataVersion+suffix+".db")
	db, err := sqlite.Open(ctx, path)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	const sandboxes = 10
	page, err := db.QueryLogs(ctx, store.LogQuery{TeamID: "team", SandboxID: "sb09", Backward: true, Limit: 1})
	if err != nil {
		b.Fatal(err)
	}
	if len(page.Lines) == 0 || page.Lines[0].Message != "the last line" {
		start := time.Now()
		r := rand.New(rand.NewSource(1))
		batch := make([]store.LogLine, 0, 5000)
		for i := range total {
			l := benchLine(r, i%sandboxes, base.Add(time.Duration(i)*time.Millisecond))
			if i == total-1 {
				l.Message = "the last line"
			}
			batch = append(batch, l)
			if len(batch) == cap(batch) {
				if err := db.InsertLogs(ctx, batch); err != nil {
					b.Fatal(err)
				}
				batch = batch[:0]
			}
		}
		b.Logf("loaded %d lines into %s in %v", total, path, time.Since(start))
	}
	end := base.Add(time.Duration(total) * time.Millisecond)
	queries := []store.LogQuery{
		{Search: "timeout"},                                   // common: the first page fills fast
		{Search: "deprecated compile", Backward: true},        // two words
		{Search: "id=123456"},                                 // rare: scans the sandbox
		{Search: "absent_word"},                               // none: scans the sandbox
		{Search: "error", MinLevel: "error", Limit: 100},      // search and level
		{Fields: map[string]string{"taskId": "t7"}},           // a field
		{RequestID: "req_03_102", Backward: true, Limit: 100}, // a request
		{PID: 101, Stream: "stdout", Limit: 100},              // a process
		{Cursor: end.Add(-time.Minute), Search: "retry"},      // a recent window
		{Search: `"cache miss"`, Backward: true, Limit: 50},   // a phrase
		{MinLevel: "warn", Backward: true},                    // tail of warnings
	}
	var ds []time.Duration
	byQuery := make([]time.Duration, len(queries)) // the slowest run of each
	b.ResetTimer()
	for i := range b.N {
		q := queries[i%len(queries)]
		q.TeamID, q.SandboxID = "team", fmt.Sprintf("sb%02d", i%sandboxes)
		start := time.Now()
		if _, err := db.QueryLogs(ctx, q); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(start))
		byQuery[i%len(queries)] = max(byQuery[i%len(queries)], ds[len(ds)-1])
	}
	b.StopTimer()
	for i, q := range queries {
		b.Logf("slowest %-8v search=%q level=%q fields=%v request=%q pid=%d backward=%v", byQuery[i].Round(time.Millisecond), q.Search, q.MinLevel, q.Fields, q.RequestID, q.PID, q.Backward)
	}
	slices.Sort(ds)
	pct := func(p float64) float64 { return float64(ds[int(p*float64(len(ds)-1))].Microseconds()) / 1000 }
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.95), "p95-ms")
	b.ReportMetric(pct(1), "max-ms")
}
