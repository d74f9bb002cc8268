// Package retention gives every store that grows with use an end: a TTL and a size cap per
// dataset (events, webhook deliveries, metric samples, command records, log lines, template
// build records, uploads and build logs), pruned
// in small batches by one background loop, and reported in `cove admin status` and on
// /metrics.
//
// The one idea: a prune never holds the store's one writer for long. Each batch is one short
// write transaction of at most Config.Batch rows; between batches the loop yields, so the
// ingester's and the API's writes interleave with it.
package retention

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	cove "github.com/cove-dev/cove/sdk"

	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/store"
)

// Policy is one dataset's end: rows older than TTL go, and past MaxRows the oldest go.
// Zero means no limit of that kind.
type Policy struct {
	TTL     time.Duration
	MaxRows int64
}

// Defaults are the policies a server starts with.
func Defaults() map[store.Dataset]Policy {
	return map[store.Dataset]Policy{
		store.DatasetEvents:     {TTL: 30 * 24 * time.Hour, MaxRows: 1_000_000},
		store.DatasetDeliveries: {TTL: 7 * 24 * time.Hour, MaxRows: 1_000_000},
		store.DatasetSamples:    {TTL: 24 * time.Hour, MaxRows: 5_000_000},
		store.DatasetCommands:   {TTL: 7 * 24 * time.Hour, MaxRows: 1_000_000},
		store.DatasetLogs:       {TTL: 7 * 24 * time.Hour, MaxRows: 50_000_000},
		store.DatasetBuilds:     {TTL: 30 * 24 * time.Hour, MaxRows: 10_000},
		store.DatasetUploads:    {TTL: 7 * 24 * time.Hour, MaxRows: 10_000},
		store.DatasetBuildLogs:  {TTL: 30 * 24 * time.Hour, MaxRows: 10_000},
	}
}

// Config configures a Retainer.
type Config struct {
	Store store.RetentionStore
	// Files keep the datasets that live in files (store.Dataset.InFiles); one missing here
	// is not pruned nor shown.
	Files    map[store.Dataset]store.RetentionStore
	Policies map[store.Dataset]Policy // Defaults() for a dataset missing here
	Interval time.Duration            // between passes; 1 min when 0
	Batch    int                      // rows per write transaction; 1000 when 0
	// Pause is the yield between batches, for writers; 10 ms when 0.
	Pause  time.Duration
	Logger *slog.Logger
}

// Status is one dataset's line in `cove admin status` (the SDK's StoreStatus, the one shape of
// GET /admin/status): what it keeps, for how long, and how
// big it is now.
type Status = cove.StoreStatus

// Retainer runs the prune loop and answers status.
type Retainer struct {
	cfg Config

	mu     sync.Mutex
	pruned map[store.Dataset]int64
	last   time.Time
}

// New returns a Retainer over cfg; Run starts its loop.
func New(cfg Config) *Retainer {
	pol := Defaults()
	for d, p := range cfg.Policies {
		pol[d] = p
	}
	cfg.Policies = pol
	if cfg.Interval <= 0 {
		cfg.Interval = time.Minute
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 1000
	}
	if cfg.Pause <= 0 {
		cfg.Pause = 10 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = telemetry.Logger(context.Background())
	}
	for d, p := range pol {
		telemetry.StoreRetentionSeconds.WithLabelValues(d.String()).Set(p.TTL.Seconds())
		telemetry.StoreMaxRows.WithLabelValues(d.String()).Set(float64(p.MaxRows))
	}
	return &Retainer{cfg: cfg, pruned: map[store.Dataset]int64{}}
}

// Run prunes every Interval until ctx ends.
func (r *Retainer) Run(ctx context.Context) {
	tick := time.NewTicker(r.cfg.Interval)
	defer tick.Stop()
	for {
		r.Pass(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Pass prunes every dataset once, by age then by cap, and refreshes the gauges.
func (r *Retainer) Pass(ctx context.Context) {
	now := time.Now()
	for _, d := range store.Datasets() {
		st := r.storeFor(d)
		if st == nil {
			continue
		}
		p := r.cfg.Policies[d]
		ttl, capped := r.prune(ctx, st, d, p, now)
		if ttl+capped > 0 {
			r.cfg.Logger.Info("retention: pruned", telemetry.KeyDataset, d.String(), telemetry.KeyTTLRows, ttl, telemetry.KeyCapRows, capped)
		}
		if u, err := st.Usage(ctx, d, false); err == nil {
			r.gauges(d, u, now, false)
		}
	}
	r.mu.Lock()
	r.last = now
	r.mu.Unlock()
}

// storeFor is what keeps d: Config.Files for a dataset in files, else Config.Store; nil
// when nothing keeps it here.
func (r *Retainer) storeFor(d store.Dataset) store.RetentionStore {
	if st, ok := r.cfg.Files[d]; ok {
		return st
	}
	if d.InFiles() {
		return nil
	}
	return r.cfg.Store
}

// maxBatches bounds one dataset's batches in one pass, so a pass ends even while writers
// add rows as fast as it prunes them; the next pass goes on.
const maxBatches = 1000

// prune deletes d's rows past p in batches, pausing between them.
func (r *Retainer) prune(ctx context.Context, st store.RetentionStore, d store.Dataset, p Policy, now time.Time) (ttl, capped int64) {
	batches := func(why string, one func() (int64, error)) int64 {
		var total int64
		for i := 0; i < maxBatches && ctx.Err() == nil; i++ {
			n, err := one()
			if err != nil {
				if ctx.Err() == nil {
					telemetry.Warnings.Warn(ctx, r.cfg.Logger, "retention "+d.String(), "retention: prune failed",
						telemetry.KeyDataset, d.String(), telemetry.KeyError, err.Error())
				}
				break
			}
			total += n
			telemetry.StorePruned.WithLabelValues(d.String(), why).Add(float64(n))
			if n < int64(r.cfg.Batch) { // the last batch: what is left is in bounds (or new)
				break
			}
			select { // the store's writers go between batches
			case <-ctx.Done():
			case <-time.After(r.cfg.Pause):
			}
		}
		return total
	}
	if p.TTL > 0 {
		before := now.Add(-p.TTL)
		ttl = batches("ttl", func() (int64, error) { return st.PruneBefore(ctx, d, before, r.cfg.Batch) })
	}
	if p.MaxRows > 0 {
		capped = batches("cap", func() (int64, error) { return st.PruneOverCap(ctx, d, p.MaxRows, r.cfg.Batch) })
	}
	r.mu.Lock()
	r.pruned[d] += ttl + capped
	r.mu.Unlock()
	return ttl, capped
}

func (r *Retainer) gauges(d store.Dataset, u store.Usage, now time.Time, bytes bool) {
	name := d.String()
	telemetry.StoreRows.WithLabelValues(name).Set(float64(u.Rows))
	age := 0.0
	if !u.Oldest.IsZero() {
		age = now.Sub(u.Oldest).Seconds()
	}
	telemetry.StoreOldestAgeSeconds.WithLabelValues(name).Set(age)
	if bytes {
		telemetry.StoreBytes.WithLabelValues(name).Set(float64(u.Bytes))
	}
}

// Status reads every dataset's usage now, its size included.
func (r *Retainer) Status(ctx context.Context) ([]Status, error) {
	now := time.Now()
	r.mu.Lock()
	last := r.last
	pruned := make(map[store.Dataset]int64, len(r.pruned))
	for d, n := range r.pruned {
		pruned[d] = n
	}
	r.mu.Unlock()
	out := make([]Status, 0, len(store.Datasets()))
	for _, d := range store.Datasets() {
		st := r.storeFor(d)
		if st == nil {
			continue
		}
		u, err := st.Usage(ctx, d, true)
		if err != nil {
			return nil, fmt.Errorf("status of %s: %w", d, err)
		}
		r.gauges(d, u, now, true)
		p := r.cfg.Policies[d]
		out = append(out, Status{Dataset: d.String(), TTLSeconds: int64(p.TTL / time.Second), MaxRows: p.MaxRows,
			Rows: u.Rows, Bytes: u.Bytes, Oldest: u.Oldest, PrunedTotal: pruned[d], LastPruneAt: last})
	}
	return out, nil
}

// ParseFlag reads "DATASET=TTL[:MAXROWS]" (log_lines=72h:10000000; a TTL of 0 or a cap of
// 0 means none), naming what is wrong.
func ParseFlag(s string) (store.Dataset, Policy, error) {
	name, spec, ok := strings.Cut(s, "=")
	if !ok {
		return "", Policy{}, fmt.Errorf("%q: want DATASET=TTL[:MAXROWS], e.g. log_lines=72h:10000000", s)
	}
	d, err := store.ParseDataset(name)
	if err != nil {
		return "", Policy{}, fmt.Errorf("%q: %w (one of %v)", s, err, store.Datasets())
	}
	ttlStr, rowsStr, hasRows := strings.Cut(spec, ":")
	var p Policy
	if p.TTL, err = time.ParseDuration(ttlStr); err != nil || p.TTL < 0 {
		return "", Policy{}, fmt.Errorf("%q: TTL %q is not a duration such as 72h", s, ttlStr)
	}
	if hasRows {
		if p.MaxRows, err = strconv.ParseInt(rowsStr, 10, 64); err != nil || p.MaxRows < 0 {
			return "", Policy{}, fmt.Errorf("%q: MAXROWS %q is not a count", s, rowsStr)
		}
	}
	return d, p, nil
}
