package retention_test

import (
	"context"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/cove-dev/cove/internal/observe/retention"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/store/sqlite"
)

// counting wraps the store to see each prune call's size and when it ran.
type counting struct {
	*sqlite.DB
	mu    sync.Mutex
	calls []int64
	at    []time.Time
}

func (c *counting) PruneBefore(ctx context.Context, d store.Dataset, before time.Time, batch int) (int64, error) {
	n, err := c.DB.PruneBefore(ctx, d, before, batch)
	if d == store.DatasetSamples {
		c.mu.Lock()
		c.calls, c.at = append(c.calls, n), append(c.at, time.Now())
		c.mu.Unlock()
	}
	return n, err
}

func samples(from time.Time, n int, step time.Duration) []store.MetricSample {
	out := make([]store.MetricSample, n)
	for i := range out {
		out[i] = store.MetricSample{SandboxID: "isb", TeamID: "t", Time: from.Add(time.Duration(i) * step)}
	}
	return out
}

func TestRetention(t *testing.T) {
	ctx := context.Background()
	db, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "cove.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	old := time.Now().Add(-48 * time.Hour)
	if err := db.InsertSamples(ctx, samples(old, 2000, time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if err := db.InsertSamples(ctx, samples(time.Now().Add(-time.Minute), 30, time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	cs := &counting{DB: db}
	r := retention.New(retention.Config{Store: cs, Batch: 100, Pause: 5 * time.Millisecond,
		Policies: map[store.Dataset]retention.Policy{store.DatasetSamples: {TTL: 24 * time.Hour, MaxRows: 20}}})

	// A writer keeps inserting while the pass prunes: its writes land between batches.
	var writes []time.Time
	var stop atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; !stop.Load(); i++ {
			if err := db.InsertSamples(ctx, []store.MetricSample{{SandboxID: "iw", TeamID: "t", Time: time.Now().Add(time.Duration(i) * time.Microsecond)}}); err != nil {
				t.Error(err)
				return
			}
			writes = append(writes, time.Now())
			time.Sleep(time.Millisecond) // a busy sampler's pace, not a tight loop
		}
	}()
	r.Pass(ctx)
	stop.Store(true)
	<-done

	t.Run("rows past the TTL go in batches of at most Batch", func(t *testing.T) {
		var total int64
		for _, n := range cs.calls {
			if n > 100 {
				t.Errorf("a batch pruned %d rows, over 100", n)
			}
			total += n
		}
		if total != 2000 || len(cs.calls) < 20 {
			t.Errorf("pruned %d rows in %d batches, want 2000 in at least 20", total, len(cs.calls))
		}
	})
	t.Run("a writer's inserts land between the batches, not after them all", func(t *testing.T) {
		first, last := cs.at[0], cs.at[len(cs.at)-1]
		between := 0
		for _, w := range writes {
			if w.After(first) && w.Before(last) {
				between++
			}
		}
		if between == 0 {
			t.Errorf("no write of %d committed while the prune ran (%v to %v)", len(writes), first, last)
		}
	})
	t.Run("past the cap the oldest go", func(t *testing.T) {
		r.Pass(ctx) // the writer added rows after the first pass's cap: this one ends with it still
		u, err := db.Usage(ctx, store.DatasetSamples, false)
		if err != nil || u.Rows != 20 {
			t.Errorf("usage %+v %v, want 20 rows", u, err)
		}
	})
	t.Run("status and the gauges say what is kept, for how long, and how big", func(t *testing.T) {
		st, err := r.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		byName := map[string]retention.Status{}
		for _, s := range st {
			byName[s.Dataset] = s
		}
		s := byName["metric_samples"]
		if len(st) != 5 || s.Rows != 20 || s.TTLSeconds != 86400 || s.MaxRows != 20 || s.Bytes <= 0 || s.PrunedTotal < 2000 || s.LastPruneAt.IsZero() {
			t.Errorf("status %+v", st)
		}
		if byName["events"].TTLSeconds != int64(30*24*time.Hour/time.Second) {
			t.Errorf("events keep the default TTL: %+v", byName["events"])
		}
		for _, g := range []struct {
			name      string
			got, want float64
		}{
			{"cove_store_rows", gauge(telemetry.StoreRows.WithLabelValues("metric_samples")), 20},
			{"cove_store_retention_seconds", gauge(telemetry.StoreRetentionSeconds.WithLabelValues("metric_samples")), 86400},
			{"cove_store_max_rows", gauge(telemetry.StoreMaxRows.WithLabelValues("metric_samples")), 20},
		} {
			if g.got != g.want {
				t.Errorf("%s{dataset=metric_samples} = %v, want %v", g.name, g.got, g.want)
			}
		}
		if gauge(telemetry.StoreBytes.WithLabelValues("metric_samples")) <= 0 {
			t.Error("cove_store_bytes{dataset=metric_samples} not set by status")
		}
	})
}

func TestParseFlag(t *testing.T) {
	tests := []struct {
		in   string
		d    store.Dataset
		p    retention.Policy
		fail bool
	}{
		{in: "log_lines=72h:10000000", d: store.DatasetLogs, p: retention.Policy{TTL: 72 * time.Hour, MaxRows: 10_000_000}},
		{in: "events=0", d: store.DatasetEvents, p: retention.Policy{}},
		{in: "logs=72h", fail: true},
		{in: "events=forever", fail: true},
		{in: "events=1h:-3", fail: true},
		{in: "events", fail: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			d, p, err := retention.ParseFlag(tt.in)
			if (err != nil) != tt.fail || (!tt.fail && (d != tt.d || p != tt.p)) {
				t.Errorf("ParseFlag(%q) = %v %+v %v", tt.in, d, p, err)
			}
		})
	}
}

func gauge(g prometheus.Gauge) float64 {
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		return -1
	}
	return m.GetGauge().GetValue()
}
