package postgres

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/cove-dev/cove/internal/store"
)

var _ store.RetentionStore = (*DB)(nil)

// dataset says how one store.Dataset lives in PostgreSQL.
type dataset struct {
	tables []string // tables (partitioned ones with their partitions) whose size is its size
	count  string   // its rows
	oldest string   // its oldest row's time
	// prune deletes up to $2 prunable rows older than $1, oldest first, with what hangs off
	// them, in one statement.
	prune string
	// days is the table partitioned by day whose whole days PruneBefore drops first; "".
	days string
}

var datasets = map[store.Dataset]dataset{
	store.DatasetEvents: {
		tables: []string{"events"},
		count:  `SELECT count(*) FROM events`,
		oldest: `SELECT min(ts) FROM events`,
		// An event whose delivery is still pending is the outbox's: it stays.
		prune: `WITH v AS (SELECT id, ts FROM events e WHERE ts < $1 AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d
				WHERE d.event_id = e.id AND d.state = 'pending') ORDER BY ts, id LIMIT $2),
			gone AS (DELETE FROM webhook_deliveries WHERE event_id IN (SELECT id FROM v))
			DELETE FROM events WHERE (id, ts) IN (SELECT id, ts FROM v)`,
		days: "events",
	},
	store.DatasetDeliveries: {
		tables: []string{"webhook_deliveries", "webhook_attempts"},
		count:  `SELECT count(*) FROM webhook_deliveries`,
		oldest: `SELECT min(created_at) FROM webhook_deliveries`,
		prune: `DELETE FROM webhook_deliveries WHERE id IN (SELECT id FROM webhook_deliveries
			WHERE created_at < $1 AND state != 'pending' ORDER BY created_at, id LIMIT $2)`,
	},
	store.DatasetSamples: {
		tables: []string{"sandbox_metrics"},
		count:  `SELECT count(*) FROM sandbox_metrics`,
		oldest: `SELECT min(ts) FROM sandbox_metrics`,
		prune: `DELETE FROM sandbox_metrics WHERE (sandbox_id, ts) IN (SELECT sandbox_id, ts FROM sandbox_metrics
			WHERE ts < $1 ORDER BY ts LIMIT $2)`,
	},
	store.DatasetCommands: {
		tables: []string{"commands"},
		count:  `SELECT count(*) FROM commands`,
		oldest: `SELECT min(ended_at) FROM commands WHERE ended_at IS NOT NULL`,
		prune: `DELETE FROM commands WHERE (sandbox_id, pid, started_at) IN (SELECT sandbox_id, pid, started_at FROM commands
			WHERE ended_at IS NOT NULL AND ended_at < $1 ORDER BY ended_at LIMIT $2)`,
	},
	store.DatasetLogs: {
		tables: []string{"log_lines"},
		count:  `SELECT count(*) FROM log_lines`,
		oldest: `SELECT min(ts) FROM log_lines`,
		prune:  `DELETE FROM log_lines WHERE ctid IN (SELECT ctid FROM log_lines WHERE ts < $1 ORDER BY ts, seq LIMIT $2)`,
		days:   "log_lines",
	},
}

func datasetOf(d store.Dataset) (dataset, error) {
	ds, ok := datasets[d]
	if !ok {
		return dataset{}, fmt.Errorf("%w: unknown dataset %q", store.ErrInvalid, d)
	}
	return ds, nil
}

// Usage implements store.RetentionStore; bytes sums the tables' and their partitions' sizes.
func (db *DB) Usage(ctx context.Context, d store.Dataset, bytes bool) (store.Usage, error) {
	ds, err := datasetOf(d)
	if err != nil {
		return store.Usage{}, err
	}
	var u store.Usage
	if err := db.pool.QueryRow(ctx, ds.count).Scan(&u.Rows); err != nil {
		return u, fmt.Errorf("usage of %s: %w", d, err)
	}
	var oldest *time.Time
	if err := db.pool.QueryRow(ctx, ds.oldest).Scan(&oldest); err != nil {
		return u, fmt.Errorf("usage of %s: %w", d, err)
	}
	if oldest != nil {
		u.Oldest = oldest.UTC()
	}
	if bytes {
		if err := db.pool.QueryRow(ctx, `SELECT COALESCE(sum(pg_total_relation_size(p.relid)), 0)::bigint
			FROM unnest($1::text[]) t, pg_partition_tree(t::regclass) p`, ds.tables).Scan(&u.Bytes); err != nil {
			return u, fmt.Errorf("size of %s: %w", d, err)
		}
	}
	return u, nil
}

// PruneBefore implements store.RetentionStore: for a dataset kept in day partitions, the days
// wholly before before are dropped first (what they held counts), then up to batch rows of
// the day before falls in are deleted.
func (db *DB) PruneBefore(ctx context.Context, d store.Dataset, before time.Time, batch int) (int64, error) {
	ds, err := datasetOf(d)
	if err != nil {
		return 0, err
	}
	var dropped int64
	if ds.days != "" && d != store.DatasetEvents {
		// Events keep a day while an event of it has a pending delivery: the row deletes
		// below skip those rows one by one.
		if dropped, err = db.parts.dropDaysBefore(ctx, db, ds.days, before); err != nil {
			return dropped, fmt.Errorf("prune %s: %w", d, err)
		}
	} else if ds.days != "" {
		if dropped, err = db.dropEventDays(ctx, before); err != nil {
			return dropped, fmt.Errorf("prune %s: %w", d, err)
		}
	}
	tag, err := db.pool.Exec(ctx, ds.prune, before, batch)
	if err != nil {
		return dropped, fmt.Errorf("prune %s: %w", d, err)
	}
	return dropped + tag.RowsAffected(), nil
}

// dropEventDays drops the events' days wholly before cutoff that no pending delivery needs,
// with those days' finished deliveries.
func (db *DB) dropEventDays(ctx context.Context, cutoff time.Time) (int64, error) {
	var pending *time.Time
	if err := db.pool.QueryRow(ctx, `SELECT min(event_ts) FROM webhook_deliveries WHERE state = 'pending'`).Scan(&pending); err != nil {
		return 0, err
	}
	if pending != nil && pending.Before(cutoff) {
		cutoff = pending.UTC().Truncate(24 * time.Hour) // keep the day a pending delivery needs, and those after it
	}
	if _, err := db.pool.Exec(ctx, `DELETE FROM webhook_deliveries WHERE event_ts < $1 AND state != 'pending'`,
		cutoff.UTC().Truncate(24*time.Hour)); err != nil {
		return 0, err
	}
	return db.parts.dropDaysBefore(ctx, db, "events", cutoff)
}

// PruneOverCap implements store.RetentionStore: the oldest rows go first.
func (db *DB) PruneOverCap(ctx context.Context, d store.Dataset, maxRows int64, batch int) (int64, error) {
	ds, err := datasetOf(d)
	if err != nil {
		return 0, err
	}
	u, err := db.Usage(ctx, d, false)
	if err != nil {
		return 0, err
	}
	over := u.Rows - maxRows
	if over <= 0 {
		return 0, nil
	}
	tag, err := db.pool.Exec(ctx, ds.prune, time.UnixMicro(math.MaxInt64/2), min(int64(batch), over))
	if err != nil {
		return 0, fmt.Errorf("prune %s: %w", d, err)
	}
	return tag.RowsAffected(), nil
}
