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

// TraceLogs returns the team's lines logged with requestID, oldest first: those of the
// chunks log_chunk_requests lists for it.
func (db *DB) TraceLogs(ctx context.Context, teamID, requestID string, limit int) ([]store.LogLine, error) {
	if requestID == "" {
		return nil, nil
	}
	limit = traceLimit(limit)
	c := &lineCollector{need: limit}
	err := db.scanChunks(ctx, `SELECT c.sandbox_id, c.team_id, c.template_id, c.min_ts, c.max_ts, c.min_seq, c.data
		FROM log_chunk_requests r JOIN log_chunks c ON c.id = r.chunk_id
		WHERE r.request_id = ? AND r.team_id = ? ORDER BY c.min_ts, c.id`, []any{requestID, teamID}, c,
		func(l *chunkLine) bool { return string(l.request) == requestID })
	if err != nil {
		return nil, fmt.Errorf("trace logs of %s: %w", requestID, err)
	}
	c.settle()
	var out []store.LogLine
	for _, l := range c.lines {
		out = append(out, l.line)
	}
	return out, nil
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
