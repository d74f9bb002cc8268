package postgres

import (
	"context"
	"time"
)

// DropEventDaysBefore drops the events' day partitions that end at or before cutoff.
func DropEventDaysBefore(ctx context.Context, db *DB, cutoff time.Time) (int64, error) {
	return db.parts.dropDaysBefore(ctx, db, "events", cutoff)
}
