package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/cove-dev/cove/internal/store"
)

// dataset says how one store.Dataset lives in SQLite: its tables (for its size), how to
// count it, its oldest time, and the ids of its oldest prunable rows.
type dataset struct {
	tables []string // tables whose pages (and their indexes') make its size
	count  string   // its rows (lines for logs)
	oldest string   // its oldest row's time, unix microseconds, by an index or rowid (no scan)
	// victims selects up to ? (limit) keys of prunable rows older than ? (cutoff), oldest
	// first: keys columns, then the units each holds (1, or a chunk's lines).
	victims string
	keys    int
	// remove deletes the rows of the given keys, and what hangs off them.
	remove []string
}

var datasets = map[store.Dataset]dataset{
	store.DatasetEvents: {
		tables: []string{"events"},
		count:  `SELECT COUNT(*) FROM events`,
		// Rows are inserted in time order, so rowid order is age order without an index on ts.
		oldest: `SELECT (SELECT ts FROM events ORDER BY rowid LIMIT 1)`,
		// An event whose delivery is still pending is the outbox's: it stays.
		victims: `SELECT id, 1 FROM events e WHERE ts < ? AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d
			WHERE d.event_id = e.id AND d.state = 'pending') ORDER BY rowid LIMIT ?`,
		remove: []string{
			`DELETE FROM webhook_attempts WHERE delivery_id IN (SELECT id FROM webhook_deliveries WHERE event_id = ?)`,
			`DELETE FROM webhook_deliveries WHERE event_id = ?`,
			`DELETE FROM events WHERE id = ?`,
		},
	},
	store.DatasetDeliveries: {
		tables: []string{"webhook_deliveries", "webhook_attempts"},
		count:  `SELECT COUNT(*) FROM webhook_deliveries`,
		oldest: `SELECT (SELECT created_at FROM webhook_deliveries ORDER BY rowid LIMIT 1)`,
		victims: `SELECT id, 1 FROM webhook_deliveries WHERE created_at < ? AND state != 'pending'
			ORDER BY rowid LIMIT ?`,
		remove: []string{
			`DELETE FROM webhook_attempts WHERE delivery_id = ?`,
			`DELETE FROM webhook_deliveries WHERE id = ?`,
		},
	},
	store.DatasetSamples: {
		tables:  []string{"sandbox_metrics"},
		count:   `SELECT COUNT(*) FROM sandbox_metrics`,
		oldest:  `SELECT MIN(ts) FROM sandbox_metrics`,
		victims: `SELECT sandbox_id, ts, 1 FROM sandbox_metrics WHERE ts < ? ORDER BY ts LIMIT ?`, keys: 2,
		remove: []string{`DELETE FROM sandbox_metrics WHERE sandbox_id = ? AND ts = ?`},
	},
	store.DatasetCommands: {
		tables: []string{"commands"},
		count:  `SELECT COUNT(*) FROM commands`,
		oldest: `SELECT MIN(ended_at) FROM commands WHERE ended_at IS NOT NULL`, // the age its TTL goes by
		victims: `SELECT sandbox_id, pid, started_at, 1 FROM commands WHERE ended_at IS NOT NULL AND ended_at < ?
			ORDER BY ended_at LIMIT ?`, keys: 3,
		remove: []string{`DELETE FROM commands WHERE sandbox_id = ? AND pid = ? AND started_at = ?`},
	},
	store.DatasetLogs: {
		tables:  []string{"log_chunks", "log_chunk_requests"},
		count:   `SELECT COALESCE(SUM(lines), 0) FROM log_chunks`,
		oldest:  `SELECT MIN(min_ts) FROM log_chunks`,
		victims: `SELECT id, lines FROM log_chunks WHERE max_ts < ? ORDER BY max_ts LIMIT ?`,
		remove: []string{
			`DELETE FROM log_chunk_requests WHERE chunk_id = ?`,
			`DELETE FROM log_chunks WHERE id = ?`,
		},
	},
}

func datasetOf(d store.Dataset) (dataset, error) {
	ds, ok := datasets[d]
	if !ok {
		return dataset{}, fmt.Errorf("%w: unknown dataset %q", store.ErrInvalid, d)
	}
	return ds, nil
}

// Usage implements store.RetentionStore. bytes reads the tables' pages (dbstat), which
// costs a walk of them: ask for it on demand, not on every tick.
func (db *DB) Usage(ctx context.Context, d store.Dataset, bytes bool) (store.Usage, error) {
	ds, err := datasetOf(d)
	if err != nil {
		return store.Usage{}, err
	}
	var u store.Usage
	if err := db.read.QueryRowContext(ctx, ds.count).Scan(&u.Rows); err != nil {
		return u, fmt.Errorf("usage of %s: %w", d, err)
	}
	var oldest sql.NullInt64
	if err := db.read.QueryRowContext(ctx, ds.oldest).Scan(&oldest); err != nil {
		return u, fmt.Errorf("usage of %s: %w", d, err)
	}
	if oldest.Valid {
		u.Oldest = fromMicros(oldest.Int64)
	}
	if bytes {
		q := `SELECT COALESCE(SUM(pgsize), 0) FROM dbstat WHERE name IN (SELECT name FROM sqlite_schema WHERE tbl_name IN (?` +
			strings.Repeat(",?", len(ds.tables)-1) + `))`
		args := make([]any, len(ds.tables))
		for i, t := range ds.tables {
			args[i] = t
		}
		if err := db.read.QueryRowContext(ctx, q, args...).Scan(&u.Bytes); err != nil {
			return u, fmt.Errorf("size of %s: %w", d, err)
		}
	}
	return u, nil
}

// PruneBefore implements store.RetentionStore.
func (db *DB) PruneBefore(ctx context.Context, d store.Dataset, before time.Time, batch int) (int64, error) {
	ds, err := datasetOf(d)
	if err != nil {
		return 0, err
	}
	return db.pruneBatch(ctx, d, ds, toMicros(before), batch, -1)
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
	return db.pruneBatch(ctx, d, ds, 1<<62, batch, over)
}

// pruneBatch deletes up to batch prunable rows older than cutoff, stopping once it has
// deleted units (lines for logs) when units >= 0. It returns the units deleted.
func (db *DB) pruneBatch(ctx context.Context, d store.Dataset, ds dataset, cutoff int64, batch int, units int64) (int64, error) {
	rows, err := db.read.QueryContext(ctx, ds.victims, cutoff, batch)
	if err != nil {
		return 0, fmt.Errorf("prune %s: %w", d, err)
	}
	type victim struct {
		key   []any
		units int64
	}
	var vs []victim
	var sum int64
	for rows.Next() && (units < 0 || sum < units) {
		v := victim{key: make([]any, max(ds.keys, 1))}
		dest := make([]any, 0, len(v.key)+1)
		for i := range v.key {
			dest = append(dest, &v.key[i])
		}
		if err := rows.Scan(append(dest, &v.units)...); err != nil {
			rows.Close()
			return 0, fmt.Errorf("prune %s: %w", d, err)
		}
		vs, sum = append(vs, v), sum+v.units
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("prune %s: %w", d, err)
	}
	if len(vs) == 0 {
		return 0, nil
	}
	var deleted int64
	err = db.writeTx(ctx, func(tx *sql.Tx) error {
		deleted = 0
		for _, v := range vs {
			var n int64
			for _, q := range ds.remove {
				res, err := tx.ExecContext(ctx, q, v.key...)
				if err != nil {
					return err
				}
				n, _ = res.RowsAffected() // the last statement deletes the row itself
			}
			if n > 0 {
				deleted += v.units
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("prune %s: %w", d, err)
	}
	return deleted, nil
}

var _ store.RetentionStore = (*DB)(nil)
