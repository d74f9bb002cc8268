package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cove-dev/cove/internal/store"
)

const (
	maxLogLimit     = 1000
	defaultLogLimit = 1000
)

const logColumns = `team_id, sandbox_id, template_id, ts, seq, level, source, stream, pid, request_id, message, fields`

// InsertLogs stores lines in one transaction (COPY), in their days' partitions, numbered by
// one sequence so lines of the same microsecond keep their order across nodes.
func (db *DB) InsertLogs(ctx context.Context, lines []store.LogLine) error {
	if len(lines) == 0 {
		return nil
	}
	for i := range lines {
		if lines[i].SandboxID == "" || lines[i].TeamID == "" {
			return fmt.Errorf("insert logs: line %d: sandbox and team are required", i)
		}
		if err := db.parts.ensure(ctx, db, "log_lines", lines[i].Time); err != nil {
			return fmt.Errorf("insert logs: %w", err)
		}
	}
	err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		var first int64
		// One call reserves the batch's numbers: nextval n times, in order, in one round trip.
		if err := tx.QueryRow(ctx, `SELECT min(v) FROM (SELECT nextval('log_seq') AS v FROM generate_series(1, $1)) s`, len(lines)).Scan(&first); err != nil {
			return err
		}
		rows := make([][]any, len(lines))
		for i, l := range lines {
			rank, ok := store.LogLevelRank(l.Level)
			if !ok {
				rank = 1 // an unknown level is stored as info
			}
			var fields []byte
			if len(l.Fields) > 0 {
				b, err := json.Marshal(l.Fields)
				if err != nil {
					return fmt.Errorf("line %d fields: %w", i, err)
				}
				fields = b
			}
			rows[i] = []any{l.TeamID, l.SandboxID, l.TemplateID, l.Time, first + int64(i), int16(rank), l.Source, l.Stream,
				int32(l.PID), l.RequestID, l.Message, fields}
		}
		_, err := tx.CopyFrom(ctx, pgx.Identifier{"log_lines"}, strings.Split(strings.ReplaceAll(logColumns, " ", ""), ","), pgx.CopyFromRows(rows))
		return err
	})
	if err != nil {
		return fmt.Errorf("insert %d log lines: %w", len(lines), err)
	}
	return nil
}

type posLine struct {
	line store.LogLine
	seq  int64
}

func scanLogLine(row pgx.Row) (posLine, error) {
	var p posLine
	var level int16
	var pid int32
	var fields []byte
	l := &p.line
	if err := row.Scan(&l.TeamID, &l.SandboxID, &l.TemplateID, &l.Time, &p.seq, &level, &l.Source, &l.Stream, &pid,
		&l.RequestID, &l.Message, &fields); err != nil {
		return p, err
	}
	l.Time, l.PID = utc(l.Time), int(pid)
	l.Level = store.LogLevels[max(0, min(int(level), len(store.LogLevels)-1))]
	if fields != nil {
		if err := json.Unmarshal(fields, &l.Fields); err != nil {
			return p, fmt.Errorf("fields: %w", err)
		}
	}
	return p, nil
}

// QueryLogs returns one page of the lines q selects, in (time, seq) order, ascending or
// descending.
func (db *DB) QueryLogs(ctx context.Context, q store.LogQuery) (*store.LogPage, error) {
	if q.TeamID == "" {
		return nil, errors.New("query logs: team is required")
	}
	limit := q.Limit
	if limit <= 0 {
		limit = defaultLogLimit
	}
	limit = min(limit, maxLogLimit)
	var args []any
	arg := func(v any) string { args = append(args, v); return "$" + strconv.Itoa(len(args)) }
	where := []string{"team_id = " + arg(q.TeamID)}
	if q.SandboxID != "" {
		where = append(where, "sandbox_id = "+arg(q.SandboxID))
	}
	if q.TemplateID != "" {
		where = append(where, "template_id = "+arg(q.TemplateID))
	}
	if q.SandboxIn != nil {
		where = append(where, "sandbox_id = ANY("+arg(q.SandboxIn)+")")
	}
	if !q.Cursor.IsZero() {
		ms := q.Cursor.UnixMilli()
		if q.Backward {
			where = append(where, "ts <= "+arg(time.UnixMicro(ms*1000+999)))
		} else {
			where = append(where, "ts >= "+arg(time.UnixMilli(ms)))
		}
	}
	if !q.Since.IsZero() {
		where = append(where, "ts >= "+arg(q.Since))
	}
	if !q.Until.IsZero() {
		where = append(where, "ts < "+arg(q.Until))
	}
	order, cmp := "ASC", ">"
	if q.Backward {
		order, cmp = "DESC", "<"
	}
	if q.After != nil {
		where = append(where, "(ts, seq) "+cmp+" ("+arg(q.After.Time)+", "+arg(q.After.Seq)+")")
	}
	if q.MinLevel != "" {
		rank, ok := store.LogLevelRank(q.MinLevel)
		if !ok {
			return nil, fmt.Errorf("query logs: unknown level %q", q.MinLevel)
		}
		if rank > 0 {
			where = append(where, "level >= "+arg(rank))
		}
	}
	for _, term := range store.SearchTerms(q.Search) {
		// lower() under the C collation lowers ASCII letters only, as the SQLite store does.
		where = append(where, `strpos(lower(message COLLATE "C"), lower(`+arg(term)+` COLLATE "C")) > 0`)
	}
	for k, v := range q.Fields {
		key := arg(k)
		cond := `(jsonb_typeof(fields -> ` + key + `) = 'string' AND fields ->> ` + key + ` = ` + arg(v) + `)`
		if json.Valid([]byte(v)) {
			// Any other value compares as JSON: 5, true, null, {"k":[1,"x"]}.
			cond = `(` + cond + ` OR (jsonb_typeof(fields -> ` + key + `) != 'string' AND fields -> ` + key + ` = ` + arg(v) + `::jsonb))`
		}
		where = append(where, cond)
	}
	if q.RequestID != "" {
		where = append(where, "request_id = "+arg(q.RequestID))
	}
	if q.Source != "" {
		where = append(where, "source = "+arg(q.Source))
	}
	if q.Stream != "" {
		where = append(where, "stream = "+arg(q.Stream))
	}
	if q.PID != 0 {
		where = append(where, "pid = "+arg(q.PID))
	}
	rows, err := db.pool.Query(ctx, `SELECT `+logColumns+` FROM log_lines WHERE `+strings.Join(where, " AND ")+
		` ORDER BY ts `+order+`, seq `+order+` LIMIT `+arg(limit+1), args...)
	if err != nil {
		return nil, fmt.Errorf("query logs of %s: %w", q.SandboxID, err)
	}
	defer rows.Close()
	var lines []posLine
	for rows.Next() {
		p, err := scanLogLine(rows)
		if err != nil {
			return nil, fmt.Errorf("query logs of %s: %w", q.SandboxID, err)
		}
		lines = append(lines, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("query logs of %s: %w", q.SandboxID, err)
	}
	page := &store.LogPage{Lines: make([]store.LogLine, 0, min(len(lines), limit))}
	for _, l := range lines[:min(len(lines), limit)] {
		page.Lines = append(page.Lines, l.line)
	}
	if n := min(len(lines), limit); n > 0 {
		page.First = &store.LogPosition{Time: lines[0].line.Time, Seq: lines[0].seq}
		page.Last = &store.LogPosition{Time: lines[n-1].line.Time, Seq: lines[n-1].seq}
	}
	if len(lines) > limit {
		page.Next = &store.LogPosition{Time: lines[limit-1].line.Time, Seq: lines[limit-1].seq}
	}
	return page, nil
}

// PruneLogs drops the days that end before olderThan whole, then deletes the lines of the day
// olderThan falls in that are older than it.
func (db *DB) PruneLogs(ctx context.Context, olderThan time.Time) (int64, error) {
	n, err := db.parts.dropDaysBefore(ctx, db, "log_lines", olderThan)
	if err != nil {
		return n, fmt.Errorf("prune logs: %w", err)
	}
	tag, err := db.pool.Exec(ctx, `DELETE FROM log_lines WHERE ts < $1`, olderThan)
	if err != nil {
		return n, fmt.Errorf("prune logs: %w", err)
	}
	return n + tag.RowsAffected(), nil
}

// TraceLogs returns the team's lines logged with requestID, oldest first.
func (db *DB) TraceLogs(ctx context.Context, teamID, requestID string, limit int) ([]store.LogLine, error) {
	if requestID == "" {
		return nil, nil
	}
	rows, err := db.pool.Query(ctx, `SELECT `+logColumns+` FROM log_lines WHERE request_id = $1 AND request_id != '' AND team_id = $2
		ORDER BY ts, seq LIMIT $3`, requestID, teamID, traceLimit(limit))
	if err != nil {
		return nil, fmt.Errorf("trace logs of %s: %w", requestID, err)
	}
	defer rows.Close()
	var out []store.LogLine
	for rows.Next() {
		p, err := scanLogLine(rows)
		if err != nil {
			return nil, fmt.Errorf("trace logs of %s: %w", requestID, err)
		}
		out = append(out, p.line)
	}
	return out, rows.Err()
}

// TraceEvents returns the team's events caused by requestID, oldest first.
func (db *DB) TraceEvents(ctx context.Context, teamID, requestID string, limit int) ([]*store.Event, error) {
	rows, err := db.pool.Query(ctx, `SELECT `+eventColumns+` FROM events WHERE request_id = $1 AND request_id != '' AND team_id = $2
		ORDER BY ts, id LIMIT $3`, requestID, teamID, traceLimit(limit))
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

// TraceCommands returns the team's command records started or signalled by requestID.
func (db *DB) TraceCommands(ctx context.Context, teamID, requestID string, limit int) ([]*store.CommandRecord, error) {
	rows, err := db.pool.Query(ctx, `SELECT `+commandColumns+` FROM commands WHERE team_id = $2 AND
		((request_id = $1 AND request_id != '') OR (signal_request_id = $1 AND signal_request_id != ''))
		ORDER BY started_at, pid LIMIT $3`, requestID, teamID, traceLimit(limit))
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

// traceLimit is a trace query's limit: 1..10000, 10000 when 0 or more.
func traceLimit(n int) int {
	if n <= 0 || n > 10000 {
		return 10000
	}
	return n
}
