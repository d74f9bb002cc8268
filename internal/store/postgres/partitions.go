package postgres

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Day partitions: a table partitioned by RANGE (ts) gets one partition per UTC day, named
// <table>_YYYYMMDD, made the first time a row of that day is written. Retention drops a day
// whole (dropDaysBefore) instead of deleting its rows one by one.

const duplicateTable = "42P07"

// partitions remembers which day partitions exist, so a write checks its day in memory.
type partitions struct {
	mu   sync.Mutex
	made map[string]bool // "events_20261204"
}

func dayName(table string, day time.Time) string { return table + "_" + day.UTC().Format("20060102") }

// ensure makes the partition of table holding t, once per process; a partition another node
// made at the same moment is not an error.
func (p *partitions) ensure(ctx context.Context, db *DB, table string, t time.Time) error {
	day := t.UTC().Truncate(24 * time.Hour)
	name := dayName(table, day)
	p.mu.Lock()
	done := p.made[name]
	p.mu.Unlock()
	if done {
		return nil
	}
	_, err := db.pool.Exec(ctx, fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s PARTITION OF %s FOR VALUES FROM ('%s') TO ('%s')`,
		pgx.Identifier{name}.Sanitize(), pgx.Identifier{table}.Sanitize(), day.Format(time.RFC3339), day.Add(24*time.Hour).Format(time.RFC3339)))
	if err != nil && !isCode(err, duplicateTable) && !isCode(err, uniqueViolation) {
		return fmt.Errorf("partition %s: %w", name, err)
	}
	p.mu.Lock()
	if p.made == nil {
		p.made = map[string]bool{}
	}
	p.made[name] = true
	p.mu.Unlock()
	return nil
}

// dropDaysBefore drops the day partitions of table whose whole day ends at or before cutoff,
// and returns how many rows they held.
func (p *partitions) dropDaysBefore(ctx context.Context, db *DB, table string, cutoff time.Time) (int64, error) {
	rows, err := db.pool.Query(ctx, `SELECT c.relname FROM pg_inherits i
		JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_class p ON p.oid = i.inhparent
		WHERE p.relname = $1 ORDER BY c.relname`, table)
	if err != nil {
		return 0, err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, err
	}
	var dropped int64
	for _, name := range names {
		day, err := time.Parse("20060102", strings.TrimPrefix(name, table+"_"))
		if err != nil || day.Add(24*time.Hour).After(cutoff) {
			continue
		}
		var n int64
		if err := db.pool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{name}.Sanitize()).Scan(&n); err != nil {
			return dropped, err
		}
		if _, err := db.pool.Exec(ctx, `DROP TABLE IF EXISTS `+pgx.Identifier{name}.Sanitize()); err != nil {
			return dropped, fmt.Errorf("drop %s: %w", name, err)
		}
		p.mu.Lock()
		delete(p.made, name)
		p.mu.Unlock()
		dropped += n
	}
	return dropped, nil
}
