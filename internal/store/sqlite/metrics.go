package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/cove-dev/cove/internal/store"
)

var _ store.MetricStore = (*DB)(nil)

const metricColumns = `sandbox_id, ts, team_id, cpu_count, cpu_used_pct, mem_used, mem_total, mem_cache,
	disk_used, disk_total, net_rx_bytes, net_tx_bytes, net_rx_packets, net_tx_packets`

// latestChunk bounds the ids of one LatestSamples query, well under SQLite's variable limit.
const latestChunk = 500

// InsertSamples stores samples in one transaction; a sample at the (sandbox, time) of a
// stored one replaces it.
func (db *DB) InsertSamples(ctx context.Context, samples []store.MetricSample) error {
	if len(samples) == 0 {
		return nil
	}
	return db.writeTx(ctx, func(tx *sql.Tx) error {
		stmt, err := tx.PrepareContext(ctx, `INSERT OR REPLACE INTO sandbox_metrics (`+metricColumns+`)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
		if err != nil {
			return fmt.Errorf("insert samples: %w", err)
		}
		defer stmt.Close()
		for _, s := range samples {
			if s.SandboxID == "" || s.TeamID == "" {
				return fmt.Errorf("insert samples: sandbox and team are required")
			}
			if _, err := stmt.ExecContext(ctx, s.SandboxID, toMicros(s.Time), s.TeamID, s.CPUCount, s.CPUUsedPct,
				i64(s.MemUsed), i64(s.MemTotal), i64(s.MemCache), i64(s.DiskUsed), i64(s.DiskTotal),
				i64(s.NetRxBytes), i64(s.NetTxBytes), i64(s.NetRxPackets), i64(s.NetTxPackets)); err != nil {
				return fmt.Errorf("insert sample of %s: %w", s.SandboxID, err)
			}
		}
		return nil
	})
}

// QuerySamples returns sandboxID's samples with start <= Time <= end, oldest first; a zero
// bound is no bound.
func (db *DB) QuerySamples(ctx context.Context, sandboxID string, start, end time.Time) ([]store.MetricSample, error) {
	where, args := []string{"sandbox_id = ?"}, []any{sandboxID}
	if !start.IsZero() {
		where, args = append(where, "ts >= ?"), append(args, toMicros(start))
	}
	if !end.IsZero() {
		where, args = append(where, "ts <= ?"), append(args, toMicros(end))
	}
	out, err := db.querySamples(ctx, `SELECT `+metricColumns+` FROM sandbox_metrics WHERE `+
		strings.Join(where, " AND ")+` ORDER BY ts`, args...)
	if err != nil {
		return nil, fmt.Errorf("query samples of %s: %w", sandboxID, err)
	}
	return out, nil
}

// LatestSamples returns the newest sample of each of ids that team teamID owns.
func (db *DB) LatestSamples(ctx context.Context, teamID string, ids []string) ([]store.MetricSample, error) {
	out := []store.MetricSample{}
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), latestChunk)]
		ids = ids[len(chunk):]
		args := []any{teamID}
		for _, id := range chunk {
			args = append(args, id)
		}
		// A bare column next to max() takes its value from the row holding the maximum
		// (SQLite's documented behaviour), and the primary key makes each max one seek.
		rows, err := db.querySamples(ctx, `SELECT sandbox_id, max(ts), team_id, cpu_count, cpu_used_pct,
			mem_used, mem_total, mem_cache, disk_used, disk_total,
			net_rx_bytes, net_tx_bytes, net_rx_packets, net_tx_packets
			FROM sandbox_metrics WHERE team_id = ? AND sandbox_id IN (`+
			strings.TrimSuffix(strings.Repeat("?, ", len(chunk)), ", ")+`) GROUP BY sandbox_id`, args...)
		if err != nil {
			return nil, fmt.Errorf("latest samples: %w", err)
		}
		out = append(out, rows...)
	}
	return out, nil
}

// DownsampleSamples returns sandboxID's samples in at most points equal spans of time,
// aggregated by SQLite: the span's average CPU and largest memory, disk and counters.
func (db *DB) DownsampleSamples(ctx context.Context, sandboxID string, points int) ([]store.MetricSample, error) {
	if points < 1 {
		return nil, fmt.Errorf("downsample samples of %s: %d points", sandboxID, points)
	}
	var lo, hi sql.NullInt64
	if err := db.read.QueryRowContext(ctx, `SELECT min(ts), max(ts) FROM sandbox_metrics WHERE sandbox_id = ?`, sandboxID).Scan(&lo, &hi); err != nil {
		return nil, fmt.Errorf("downsample samples of %s: %w", sandboxID, err)
	}
	if !lo.Valid {
		return []store.MetricSample{}, nil
	}
	// Integer division puts ts in span (ts-lo)*points/(hi-lo+1), 0..points-1.
	out, err := db.querySamples(ctx, `SELECT sandbox_id, max(ts), team_id, max(cpu_count), avg(cpu_used_pct),
		max(mem_used), max(mem_total), max(mem_cache), max(disk_used), max(disk_total),
		max(net_rx_bytes), max(net_tx_bytes), max(net_rx_packets), max(net_tx_packets)
		FROM sandbox_metrics WHERE sandbox_id = ? GROUP BY (ts - ?) * ? / ? ORDER BY 2`,
		sandboxID, lo.Int64, points, hi.Int64-lo.Int64+1)
	if err != nil {
		return nil, fmt.Errorf("downsample samples of %s: %w", sandboxID, err)
	}
	return out, nil
}

// PruneSamples deletes the samples taken before before.
func (db *DB) PruneSamples(ctx context.Context, before time.Time) error {
	if _, err := db.write.ExecContext(ctx, `DELETE FROM sandbox_metrics WHERE ts < ?`, toMicros(before)); err != nil {
		return fmt.Errorf("prune samples: %w", err)
	}
	return nil
}

func (db *DB) querySamples(ctx context.Context, query string, args ...any) ([]store.MetricSample, error) {
	rows, err := db.read.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []store.MetricSample{}
	for rows.Next() {
		var s store.MetricSample
		var ts int64
		var v [9]int64
		if err := rows.Scan(&s.SandboxID, &ts, &s.TeamID, &s.CPUCount, &s.CPUUsedPct,
			&v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8]); err != nil {
			return nil, err
		}
		s.Time = fromMicros(ts)
		s.MemUsed, s.MemTotal, s.MemCache = uint64(v[0]), uint64(v[1]), uint64(v[2])
		s.DiskUsed, s.DiskTotal = uint64(v[3]), uint64(v[4])
		s.NetRxBytes, s.NetTxBytes, s.NetRxPackets, s.NetTxPackets = uint64(v[5]), uint64(v[6]), uint64(v[7]), uint64(v[8])
		out = append(out, s)
	}
	return out, rows.Err()
}

// i64 stores a size as SQLite's signed integer; no real size reaches the clamp, but an
// "unlimited" cgroup value comes close.
func i64(v uint64) int64 {
	if v > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(v)
}
