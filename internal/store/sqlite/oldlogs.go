package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/cove-dev/cove/internal/store"
)

// queryOldLogs returns up to limit+1 lines q selects from the logs table, written before
// migration 0006, in the query's order.
func (db *DB) queryOldLogs(ctx context.Context, q store.LogQuery, limit int) ([]posLine, error) {
	where, args := logScope(&q)
	add := func(cond string, a ...any) { where, args = append(where, cond), append(args, a...) }

	order, cmp := "ASC", ">"
	if q.Backward {
		order, cmp = "DESC", "<"
	}
	if !q.Cursor.IsZero() {
		ms := q.Cursor.UnixMilli()
		if q.Backward {
			add("ts <= ?", ms*1000+999)
		} else {
			add("ts >= ?", ms*1000)
		}
	}
	if !q.Since.IsZero() {
		add("ts >= ?", toMicros(q.Since))
	}
	if !q.Until.IsZero() {
		add("ts < ?", toMicros(q.Until))
	}
	if q.After != nil {
		add("(ts, seq) "+cmp+" (?, ?)", toMicros(q.After.Time), q.After.Seq)
	}
	if q.MinLevel != "" {
		rank, ok := store.LogLevelRank(q.MinLevel)
		if !ok {
			return nil, fmt.Errorf("query logs: unknown level %q", q.MinLevel)
		}
		if rank > 0 {
			add("level >= ?", rank)
		}
	}
	for _, term := range searchTerms(q.Search) {
		add(`message LIKE ? ESCAPE '\'`, "%"+likeEscaper.Replace(term)+"%")
	}
	for k, v := range q.Fields {
		// The key is quoted, so dots and brackets in it are part of the name. A string
		// compares by its text, anything else by its JSON (5, true, null).
		path := `$."` + strings.ReplaceAll(k, `"`, `\"`) + `"`
		add("CASE WHEN json_type(fields, ?) = 'text' THEN fields ->> ? ELSE fields -> ? END = ?", path, path, path, v)
	}
	if q.RequestID != "" {
		add("request_id = ?", q.RequestID)
	}
	if q.Source != "" {
		add("source = ?", q.Source)
	}
	if q.Stream != "" {
		add("stream = ?", q.Stream)
	}
	if q.PID != 0 {
		add("pid = ?", q.PID)
	}
	rows, err := db.read.QueryContext(ctx, `SELECT `+logColumns+` FROM logs WHERE `+
		strings.Join(where, " AND ")+` ORDER BY ts `+order+`, seq `+order+` LIMIT ?`,
		append(args, limit+1)...)
	if err != nil {
		return nil, fmt.Errorf("query logs of %s: %w", q.SandboxID, err)
	}
	defer rows.Close()
	var out []posLine
	for rows.Next() {
		l, seq, err := scanLogLine(rows)
		if err != nil {
			return nil, fmt.Errorf("query logs of %s: %w", q.SandboxID, err)
		}
		out = append(out, posLine{line: l, seq: seq})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("query logs of %s: %w", q.SandboxID, err)
	}
	return out, nil
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
