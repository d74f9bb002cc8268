package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/cove-dev/cove/internal/store"
)

// moveOldLogs is migration 0025: the lines of the logs table, where Cove stored lines before
// log chunks (migration 0006), move into chunks with their own seqs, in (sandbox, time, seq)
// order, a batch at a time, and the table is dropped, so nothing reads two tables any more.
// It runs in the migrations' transaction: a crash leaves the table whole and the move undone.
func moveOldLogs(ctx context.Context, tx *sql.Tx) error {
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'logs'`).Scan(&n); err != nil || n == 0 {
		return err
	}
	const batch = 10000
	var after struct {
		sandbox string
		ts, seq int64
		started bool
	}
	for {
		q := `SELECT ` + logColumns + ` FROM logs ORDER BY sandbox_id, ts, seq LIMIT ?`
		args := []any{batch}
		if after.started {
			q = `SELECT ` + logColumns + ` FROM logs WHERE (sandbox_id, ts, seq) > (?, ?, ?) ORDER BY sandbox_id, ts, seq LIMIT ?`
			args = []any{after.sandbox, after.ts, after.seq, batch}
		}
		rows, err := tx.QueryContext(ctx, q, args...)
		if err != nil {
			return fmt.Errorf("old logs: %w", err)
		}
		var lines []store.LogLine
		var seqs []int64
		for rows.Next() {
			l, seq, err := scanLogLine(rows)
			if err != nil {
				rows.Close()
				return fmt.Errorf("old logs: %w", err)
			}
			lines, seqs = append(lines, l), append(seqs, seq)
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			return fmt.Errorf("old logs: %w", err)
		}
		if len(lines) == 0 {
			break
		}
		last := lines[len(lines)-1]
		after.sandbox, after.ts, after.seq, after.started = last.SandboxID, toMicros(last.Time), seqs[len(seqs)-1], true
		if err := insertChunks(ctx, tx, lines, seqs); err != nil {
			return fmt.Errorf("old logs into chunks: %w", err)
		}
	}
	if _, err := tx.ExecContext(ctx, `DROP TABLE logs`); err != nil {
		return fmt.Errorf("old logs: %w", err)
	}
	return nil
}

const logColumns = `ts, seq, sandbox_id, team_id, template_id, level, source, stream, pid, request_id, message, fields`

// scanLogLine reads one row of logColumns, returning the line and its seq.
func scanLogLine(row scanner) (store.LogLine, int64, error) {
	var l store.LogLine
	var ts, seq int64
	var level int
	var fields sql.NullString
	if err := row.Scan(&ts, &seq, &l.SandboxID, &l.TeamID, &l.TemplateID, &level, &l.Source,
		&l.Stream, &l.PID, &l.RequestID, &l.Message, &fields); err != nil {
		return l, 0, err
	}
	l.Time = fromMicros(ts)
	l.Level = store.LogLevels[max(0, min(level, len(store.LogLevels)-1))]
	if fields.Valid {
		if err := json.Unmarshal([]byte(fields.String), &l.Fields); err != nil {
			return l, 0, fmt.Errorf("fields: %w", err)
		}
	}
	return l, seq, nil
}
