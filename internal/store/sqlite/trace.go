package sqlite

import (
	"context"
	"fmt"

	"github.com/cove-dev/cove/internal/store"
)

var _ store.TraceStore = (*DB)(nil)

func traceLimit(n int) int {
	if n <= 0 || n > 10000 {
		return 10000
	}
	return n
}

// Each query repeats its partial index's condition (!= '') so the planner may use it.

// TraceLogs returns the team's lines logged with requestID, oldest first.
func (db *DB) TraceLogs(ctx context.Context, teamID, requestID string, limit int) ([]store.LogLine, error) {
	rows, err := db.read.QueryContext(ctx, `SELECT `+logColumns+` FROM logs
		WHERE request_id = ? AND request_id != '' AND team_id = ? ORDER BY ts, seq LIMIT ?`, requestID, teamID, traceLimit(limit))
	if err != nil {
		return nil, fmt.Errorf("trace logs of %s: %w", requestID, err)
	}
	defer rows.Close()
	var out []store.LogLine
	for rows.Next() {
		l, _, err := scanLogLine(rows)
		if err != nil {
			return nil, fmt.Errorf("trace logs of %s: %w", requestID, err)
		}
		out = append(out, l)
	}
	return out, rows.Err()
}

// TraceEvents returns the team's events caused by requestID, oldest first.
func (db *DB) TraceEvents(ctx context.Context, teamID, requestID string, limit int) ([]*store.Event, error) {
	rows, err := db.read.QueryContext(ctx, `SELECT `+eventColumns+` FROM events
		WHERE request_id = ? AND request_id != '' AND team_id = ? ORDER BY ts, id LIMIT ?`, requestID, teamID, traceLimit(limit))
	if err != nil {
		return nil, fmt.Errorf("trace events of %s: %w", requestID, err)
	}
	defer rows.Close()
	var out []*store.Event
	for rows.Next() {
		ev, err := scanEvent(rows)
		if err != nil {
			return nil, fmt.Errorf("trace events of %s: %w", requestID, err)
		}
		out = append(out, ev)
	}
	return out, rows.Err()
}

// TraceCommands returns the team's commands requestID started or signalled, oldest first.
func (db *DB) TraceCommands(ctx context.Context, teamID, requestID string, limit int) ([]*store.CommandRecord, error) {
	rows, err := db.read.QueryContext(ctx, `SELECT `+commandColumns+` FROM commands
		WHERE ((request_id = ? AND request_id != '') OR (signal_request_id = ? AND signal_request_id != ''))
		AND team_id = ? ORDER BY started_at, pid LIMIT ?`,
		requestID, requestID, teamID, traceLimit(limit))
	if err != nil {
		return nil, fmt.Errorf("trace commands of %s: %w", requestID, err)
	}
	defer rows.Close()
	var out []*store.CommandRecord
	for rows.Next() {
		c, err := scanCommand(rows)
		if err != nil {
			return nil, fmt.Errorf("trace commands of %s: %w", requestID, err)
		}
		out = append(out, c)
	}
	return out, rows.Err()
}
