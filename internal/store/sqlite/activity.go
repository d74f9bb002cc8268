package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/cove-dev/cove/internal/store"
)

// SandboxSpans implements store.Activity.
func (db *DB) SandboxSpans(ctx context.Context, teamID string, from, to time.Time) ([]store.Span, error) {
	rows, err := db.read.QueryContext(ctx, `SELECT started_at, killed_at FROM sandboxes
		WHERE team_id = ? AND started_at < ? AND (killed_at IS NULL OR killed_at >= ?)
		ORDER BY started_at`, teamID, toMicros(to), toMicros(from))
	if err != nil {
		return nil, fmt.Errorf("sandbox spans: %w", err)
	}
	defer rows.Close()
	var out []store.Span
	for rows.Next() {
		var started int64
		var killed sql.NullInt64
		if err := rows.Scan(&started, &killed); err != nil {
			return nil, fmt.Errorf("sandbox spans: %w", err)
		}
		s := store.Span{Started: fromMicros(started)}
		if killed.Valid {
			s.Killed = fromMicros(killed.Int64)
		}
		out = append(out, s)
	}
	return out, rows.Err()
}
