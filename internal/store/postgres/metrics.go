package postgres

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cove-dev/cove/internal/store"
)

const metricColumns = `sandbox_id, ts, team_id, cpu_count, cpu_used_pct, mem_used, mem_total, mem_cache,
	disk_used, disk_total, net_rx_bytes, net_tx_bytes, net_rx_packets, net_tx_packets`

// i64 stores a size as a signed integer; an "unlimited" cgroup value is clamped.
func i64(v uint64) int64 {
	if v > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(v)
}

// InsertSamples stores samples in one transaction; a sample at the (sandbox, time) of a
// stored one replaces it.
func (db *DB) InsertSamples(ctx context.Context, samples []store.MetricSample) error {
	if len(samples) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	for _, s := range samples {
		if s.SandboxID == "" || s.TeamID == "" {
			return fmt.Errorf("insert samples: sandbox and team are required")
		}
		b.Queue(`INSERT INTO sandbox_metrics (`+metricColumns+`) VALUES (`+placeholders(1, 14)+`)
			ON CONFLICT (sandbox_id, ts) DO UPDATE SET team_id = excluded.team_id, cpu_count = excluded.cpu_count,
			cpu_used_pct = excluded.cpu_used_pct, mem_used = excluded.mem_used, mem_total = excluded.mem_total,
			mem_cache = excluded.mem_cache, disk_used = excluded.disk_used, disk_total = excluded.disk_total,
			net_rx_bytes = excluded.net_rx_bytes, net_tx_bytes = excluded.net_tx_bytes,
			net_rx_packets = excluded.net_rx_packets, net_tx_packets = excluded.net_tx_packets`,
			s.SandboxID, s.Time, s.TeamID, s.CPUCount, s.CPUUsedPct, i64(s.MemUsed), i64(s.MemTotal), i64(s.MemCache),
			i64(s.DiskUsed), i64(s.DiskTotal), i64(s.NetRxBytes), i64(s.NetTxBytes), i64(s.NetRxPackets), i64(s.NetTxPackets))
	}
	err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error { return tx.SendBatch(ctx, b).Close() })
	if err != nil {
		return fmt.Errorf("insert samples: %w", err)
	}
	return nil
}

func (db *DB) querySamples(ctx context.Context, query string, args ...any) ([]store.MetricSample, error) {
	rows, err := db.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []store.MetricSample{}
	for rows.Next() {
		var s store.MetricSample
		var v [9]int64
		if err := rows.Scan(&s.SandboxID, &s.Time, &s.TeamID, &s.CPUCount, &s.CPUUsedPct,
			&v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8]); err != nil {
			return nil, err
		}
		s.Time = utc(s.Time)
		s.MemUsed, s.MemTotal, s.MemCache = uint64(v[0]), uint64(v[1]), uint64(v[2])
		s.DiskUsed, s.DiskTotal = uint64(v[3]), uint64(v[4])
		s.NetRxBytes, s.NetTxBytes, s.NetRxPackets, s.NetTxPackets = uint64(v[5]), uint64(v[6]), uint64(v[7]), uint64(v[8])
		out = append(out, s)
	}
	return out, rows.Err()
}

// QuerySamples returns sandboxID's samples with start <= Time <= end, oldest first.
func (db *DB) QuerySamples(ctx context.Context, sandboxID string, start, end time.Time) ([]store.MetricSample, error) {
	var lo, hi *time.Time
	if !start.IsZero() {
		lo = &start
	}
	if !end.IsZero() {
		hi = &end
	}
	out, err := db.querySamples(ctx, `SELECT `+metricColumns+` FROM sandbox_metrics WHERE sandbox_id = $1
		AND ($2::timestamptz IS NULL OR ts >= $2) AND ($3::timestamptz IS NULL OR ts <= $3) ORDER BY ts`, sandboxID, lo, hi)
	if err != nil {
		return nil, fmt.Errorf("query samples of %s: %w", sandboxID, err)
	}
	return out, nil
}

// LatestSamples returns the newest sample of each of ids that team teamID owns.
func (db *DB) LatestSamples(ctx context.Context, teamID string, ids []string) ([]store.MetricSample, error) {
	out, err := db.querySamples(ctx, `SELECT DISTINCT ON (sandbox_id) `+metricColumns+` FROM sandbox_metrics
		WHERE team_id = $1 AND sandbox_id = ANY($2) ORDER BY sandbox_id, ts DESC`, teamID, ids)
	if err != nil {
		return nil, fmt.Errorf("latest samples: %w", err)
	}
	return out, nil
}

// PruneSamples deletes the samples taken before before.
func (db *DB) PruneSamples(ctx context.Context, before time.Time) error {
	if _, err := db.pool.Exec(ctx, `DELETE FROM sandbox_metrics WHERE ts < $1`, before); err != nil {
		return fmt.Errorf("prune samples: %w", err)
	}
	return nil
}

// DownsampleSamples returns sandboxID's samples in at most points equal spans of time: the
// span's average CPU and largest memory, disk and counters, as the SQLite store aggregates.
func (db *DB) DownsampleSamples(ctx context.Context, sandboxID string, points int) ([]store.MetricSample, error) {
	if points < 1 {
		return nil, fmt.Errorf("downsample samples of %s: %d points", sandboxID, points)
	}
	var lo, hi *time.Time
	if err := db.pool.QueryRow(ctx, `SELECT min(ts), max(ts) FROM sandbox_metrics WHERE sandbox_id = $1`, sandboxID).Scan(&lo, &hi); err != nil {
		return nil, fmt.Errorf("downsample samples of %s: %w", sandboxID, err)
	}
	if lo == nil {
		return []store.MetricSample{}, nil
	}
	span := hi.Sub(*lo).Microseconds() + 1
	out, err := db.querySamples(ctx, `SELECT sandbox_id, max(ts), team_id, max(cpu_count), avg(cpu_used_pct),
		max(mem_used), max(mem_total), max(mem_cache), max(disk_used), max(disk_total),
		max(net_rx_bytes), max(net_tx_bytes), max(net_rx_packets), max(net_tx_packets)
		FROM sandbox_metrics WHERE sandbox_id = $1
		GROUP BY sandbox_id, team_id, (extract(epoch FROM ts - $2::timestamptz) * 1000000)::bigint * $3 / $4 ORDER BY 2`,
		sandboxID, *lo, points, span)
	if err != nil {
		return nil, fmt.Errorf("downsample samples of %s: %w", sandboxID, err)
	}
	return out, nil
}
