package sqlite

import (
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cove-dev/cove/internal/store"
)

var (
	_ store.LogStore     = (*DB)(nil)
	_ store.CommandStore = (*DB)(nil)
)

// Limits of log and command queries.
const (
	maxLogLimit         = 1000
	defaultLogLimit     = 1000
	maxCommandLimit     = 1000
	defaultCommandLimit = 100
	// pruneChunk bounds the lines one prune transaction deletes, so the writer is never
	// held for long.
	pruneChunk = 5000
)

// logSeq numbers stored lines. Starting from the clock's nanoseconds keeps the numbers
// rising across restarts, so lines of the same microsecond stay in insertion order.
var logSeq atomic.Int64

func init() { logSeq.Store(time.Now().UnixNano()) }

const logColumns = `ts, seq, sandbox_id, team_id, template_id, level, source, stream, pid, request_id, message, fields`

// logColumnCount is the number of logColumns; logRowsPerInsert rows go in one INSERT.
const (
	logColumnCount   = 12
	logRowsPerInsert = 200
)

// logInsert is an INSERT of n rows of logColumns.
func logInsert(n int) string {
	row := "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
	return "INSERT INTO logs (" + logColumns + ") VALUES " + strings.TrimSuffix(strings.Repeat(row+", ", n), ", ")
}

// InsertLogs stores lines in one transaction with one prepared statement. A line with an
// unknown level is stored as info.
func (db *DB) InsertLogs(ctx context.Context, lines []store.LogLine) error {
	if len(lines) == 0 {
		return nil
	}
	for i := range lines {
		if lines[i].SandboxID == "" || lines[i].TeamID == "" {
			return fmt.Errorf("insert logs: line %d: sandbox and team are required", i)
		}
	}
	seq := logSeq.Add(int64(len(lines))) - int64(len(lines))
	// Rows go in multi-row INSERTs: per-statement overhead, not the rows, bounded ingest.
	args := make([]any, 0, logRowsPerInsert*logColumnCount)
	err := db.writeTx(ctx, func(tx *sql.Tx) error {
		var full *sql.Stmt
		defer func() {
			if full != nil {
				full.Close()
			}
		}()
		for start := 0; start < len(lines); start += logRowsPerInsert {
			chunk := lines[start:min(start+logRowsPerInsert, len(lines))]
			args = args[:0]
			for i := range chunk {
				l := &chunk[i]
				level, ok := store.LogLevelRank(l.Level)
				if !ok {
					level = 1
				}
				var fields sql.NullString
				if len(l.Fields) > 0 {
					b, err := json.Marshal(l.Fields)
					if err != nil {
						return fmt.Errorf("line %d fields: %w", start+i, err)
					}
					fields = sql.NullString{String: string(b), Valid: true}
				}
				seq++
				args = append(args, toMicros(l.Time), seq, l.SandboxID, l.TeamID, l.TemplateID,
					level, l.Source, l.Stream, l.PID, l.RequestID, l.Message, fields)
			}
			if len(chunk) == logRowsPerInsert {
				if full == nil {
					st, err := tx.PrepareContext(ctx, logInsert(logRowsPerInsert))
					if err != nil {
						return err
					}
					full = st
				}
				if _, err := full.ExecContext(ctx, args...); err != nil {
					return fmt.Errorf("lines %d-%d: %w", start, start+len(chunk)-1, err)
				}
				continue
			}
			if _, err := tx.ExecContext(ctx, logInsert(len(chunk)), args...); err != nil {
				return fmt.Errorf("lines %d-%d: %w", start, start+len(chunk)-1, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("insert %d log lines: %w", len(lines), err)
	}
	return nil
}

// likeEscaper escapes LIKE's wildcards, with \ as the escape character.
var likeEscaper = strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)

// searchTerms splits a search into the substrings a line must all contain: its
// whitespace-separated words, and each "double-quoted" phrase whole.
func searchTerms(s string) []string {
	var terms []string
	for {
		s = strings.TrimSpace(s)
		if s == "" {
			return terms
		}
		if s[0] == '"' {
			if end := strings.IndexByte(s[1:], '"'); end >= 0 {
				if phrase := s[1 : 1+end]; phrase != "" {
					terms = append(terms, phrase)
				}
				s = s[2+end:]
				continue
			}
			s = s[1:] // an unmatched quote is not part of the search
			continue
		}
		word, rest, _ := strings.Cut(s, " ")
		if i := strings.IndexAny(word, "\t\n\r"); i >= 0 {
			word, rest = word[:i], word[i:]+" "+rest
		}
		terms = append(terms, word)
		s = rest
	}
}

// QueryLogs returns one page of the lines q selects, in (time, seq) order, ascending or
// descending. The sandbox's lines are contiguous in the table, so every filter is a check
// on a scan of them, bounded by the cursor and stopped by the limit.
func (db *DB) QueryLogs(ctx context.Context, q store.LogQuery) (*store.LogPage, error) {
	if q.TeamID == "" || q.SandboxID == "" {
		return nil, errors.New("query logs: team and sandbox are required")
	}
	limit := q.Limit
	if limit <= 0 {
		limit = defaultLogLimit
	}
	limit = min(limit, maxLogLimit)
	where := []string{"sandbox_id = ?", "team_id = ?"}
	args := []any{q.SandboxID, q.TeamID}
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
	page := &store.LogPage{Lines: make([]store.LogLine, 0, min(limit, 64))}
	var seqs []int64
	for rows.Next() {
		l, seq, err := scanLogLine(rows)
		if err != nil {
			return nil, fmt.Errorf("query logs of %s: %w", q.SandboxID, err)
		}
		page.Lines = append(page.Lines, l)
		seqs = append(seqs, seq)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("query logs of %s: %w", q.SandboxID, err)
	}
	if len(page.Lines) > limit {
		page.Lines = page.Lines[:limit]
		page.Next = &store.LogPosition{Time: page.Lines[limit-1].Time, Seq: seqs[limit-1]}
	}
	return page, nil
}

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

// PruneLogs deletes lines older than olderThan, sandbox by sandbox, in transactions of at
// most pruneChunk lines.
func (db *DB) PruneLogs(ctx context.Context, olderThan time.Time) (int64, error) {
	cutoff := toMicros(olderThan)
	var total int64
	sandbox := ""
	for {
		// Walk the distinct sandboxes through the primary key, one seek each.
		err := db.read.QueryRowContext(ctx, `SELECT sandbox_id FROM logs WHERE sandbox_id > ?
			ORDER BY sandbox_id LIMIT 1`, sandbox).Scan(&sandbox)
		if errors.Is(err, sql.ErrNoRows) {
			return total, nil
		}
		if err != nil {
			return total, fmt.Errorf("prune logs: %w", err)
		}
		for {
			// Delete up to the ts of the pruneChunk-th oldest line, or up to the cutoff.
			bound := cutoff
			var ts int64
			err := db.read.QueryRowContext(ctx, `SELECT ts FROM logs WHERE sandbox_id = ? AND ts < ?
				ORDER BY ts LIMIT 1 OFFSET ?`, sandbox, cutoff, pruneChunk).Scan(&ts)
			switch {
			case err == nil:
				bound = ts
			case !errors.Is(err, sql.ErrNoRows):
				return total, fmt.Errorf("prune logs of %s: %w", sandbox, err)
			}
			res, err := db.write.ExecContext(ctx, `DELETE FROM logs WHERE sandbox_id = ? AND ts < ?`, sandbox, bound)
			if err != nil {
				return total, fmt.Errorf("prune logs of %s: %w", sandbox, err)
			}
			n, _ := res.RowsAffected()
			total += n
			if bound == cutoff {
				break
			}
			if n == 0 { // one microsecond holds more than pruneChunk lines
				res, err := db.write.ExecContext(ctx, `DELETE FROM logs WHERE sandbox_id = ? AND ts <= ?`, sandbox, bound)
				if err != nil {
					return total, fmt.Errorf("prune logs of %s: %w", sandbox, err)
				}
				n, _ := res.RowsAffected()
				total += n
			}
		}
	}
}

const commandColumns = `sandbox_id, pid, started_at, team_id, template_id, tag, request_id, user, command,
	args, cwd, ended_at, duration_us, exit_code, signal, end_cause, signal_request_id, kill_reason,
	stdout_bytes, stderr_bytes, stdout_head, stdout_tail, stderr_head, stderr_tail, truncated, redactions`

// UpsertCommand inserts c or merges it into the stored record with its key: text, times
// and counts c leaves zero, and a nil exit code, args or redactions, keep what is stored.
func (db *DB) UpsertCommand(ctx context.Context, c *store.CommandRecord) error {
	if c.SandboxID == "" || c.PID <= 0 || c.StartedAt.IsZero() {
		return errors.New("upsert command: sandbox, pid and start time are required")
	}
	args, err := jsonOrNull(c.Args, c.Args == nil)
	if err != nil {
		return fmt.Errorf("upsert command %s/%d: args: %w", c.SandboxID, c.PID, err)
	}
	redactions, err := jsonOrNull(c.Redactions, len(c.Redactions) == 0)
	if err != nil {
		return fmt.Errorf("upsert command %s/%d: redactions: %w", c.SandboxID, c.PID, err)
	}
	var ended sql.NullInt64
	duration := c.Duration
	if !c.EndedAt.IsZero() {
		ended = sql.NullInt64{Int64: toMicros(c.EndedAt), Valid: true}
		if duration == 0 {
			duration = c.EndedAt.Sub(c.StartedAt)
		}
	}
	var exit sql.NullInt64
	if c.ExitCode != nil {
		exit = sql.NullInt64{Int64: int64(*c.ExitCode), Valid: true}
	}
	text := func(col string) string {
		return col + ` = CASE WHEN excluded.` + col + ` != '' THEN excluded.` + col + ` ELSE commands.` + col + ` END`
	}
	num := func(col string) string {
		return col + ` = CASE WHEN excluded.` + col + ` != 0 THEN excluded.` + col + ` ELSE commands.` + col + ` END`
	}
	null := func(col string) string { return col + ` = coalesce(excluded.` + col + `, commands.` + col + `)` }
	set := []string{text("team_id"), text("template_id"), text("tag"), text("request_id"), text("user"),
		text("command"), null("args"), text("cwd"), null("ended_at"), num("duration_us"), null("exit_code"),
		text("signal"), text("end_cause"), text("signal_request_id"), text("kill_reason"),
		num("stdout_bytes"), num("stderr_bytes"), text("stdout_head"), text("stdout_tail"),
		text("stderr_head"), text("stderr_tail"), `truncated = max(excluded.truncated, commands.truncated)`,
		null("redactions")}
	_, err = db.write.ExecContext(ctx, `INSERT INTO commands (`+commandColumns+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (sandbox_id, pid, started_at) DO UPDATE SET `+strings.Join(set, ", "),
		c.SandboxID, c.PID, toMicros(c.StartedAt), c.TeamID, c.TemplateID, c.Tag, c.RequestID, c.User,
		c.Command, args, c.Cwd, ended, duration.Microseconds(), exit, c.Signal, c.EndCause,
		c.SignalRequestID, c.KillReason, c.StdoutBytes, c.StderrBytes, c.StdoutHead, c.StdoutTail,
		c.StderrHead, c.StderrTail, c.Truncated, redactions)
	if err != nil {
		return fmt.Errorf("upsert command %s/%d: %w", c.SandboxID, c.PID, err)
	}
	return nil
}

func scanCommand(row scanner) (*store.CommandRecord, error) {
	c := &store.CommandRecord{}
	var started, duration int64
	var ended, exit sql.NullInt64
	var args, redactions sql.NullString
	if err := row.Scan(&c.SandboxID, &c.PID, &started, &c.TeamID, &c.TemplateID, &c.Tag, &c.RequestID,
		&c.User, &c.Command, &args, &c.Cwd, &ended, &duration, &exit, &c.Signal, &c.EndCause,
		&c.SignalRequestID, &c.KillReason, &c.StdoutBytes, &c.StderrBytes, &c.StdoutHead, &c.StdoutTail,
		&c.StderrHead, &c.StderrTail, &c.Truncated, &redactions); err != nil {
		return nil, err
	}
	c.StartedAt = fromMicros(started)
	if ended.Valid {
		c.EndedAt = fromMicros(ended.Int64)
	}
	c.Duration = time.Duration(duration) * time.Microsecond
	if exit.Valid {
		code := int(exit.Int64)
		c.ExitCode = &code
	}
	if args.Valid {
		if err := json.Unmarshal([]byte(args.String), &c.Args); err != nil {
			return nil, fmt.Errorf("command %s/%d args: %w", c.SandboxID, c.PID, err)
		}
	}
	if redactions.Valid {
		if err := json.Unmarshal([]byte(redactions.String), &c.Redactions); err != nil {
			return nil, fmt.Errorf("command %s/%d redactions: %w", c.SandboxID, c.PID, err)
		}
	}
	return c, nil
}

// GetCommand returns the record of pid started at startedAt, or pid's latest when
// startedAt is zero.
func (db *DB) GetCommand(ctx context.Context, sandboxID string, pid int, startedAt time.Time) (*store.CommandRecord, error) {
	q, args := `SELECT `+commandColumns+` FROM commands WHERE sandbox_id = ? AND pid = ?`, []any{sandboxID, pid}
	if !startedAt.IsZero() {
		q, args = q+` AND started_at = ?`, append(args, toMicros(startedAt))
	}
	c, err := scanCommand(db.read.QueryRowContext(ctx, q+` ORDER BY started_at DESC LIMIT 1`, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("command %d of sandbox %s: %w", pid, sandboxID, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get command %d of sandbox %s: %w", pid, sandboxID, err)
	}
	return c, nil
}

// A command cursor is the (start, pid) of a page's last record: base64url("<unix µs>:<pid>").
func commandCursor(c *store.CommandRecord) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(toMicros(c.StartedAt), 10) + ":" + strconv.Itoa(c.PID)))
}

func parseCommandCursor(s string) (started int64, pid int, err error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return 0, 0, errors.New("not base64url")
	}
	us, p, ok := strings.Cut(string(b), ":")
	started, err1 := strconv.ParseInt(us, 10, 64)
	pid, err2 := strconv.Atoi(p)
	if !ok || err1 != nil || err2 != nil {
		return 0, 0, errors.New("malformed")
	}
	return started, pid, nil
}

// ListCommands returns the sandbox's records newest first, a page at a time.
func (db *DB) ListCommands(ctx context.Context, sandboxID string, limit int, cursor string) (*store.CommandPage, error) {
	if limit <= 0 {
		limit = defaultCommandLimit
	}
	limit = min(limit, maxCommandLimit)
	q, args := `SELECT `+commandColumns+` FROM commands WHERE sandbox_id = ?`, []any{sandboxID}
	if cursor != "" {
		started, pid, err := parseCommandCursor(cursor)
		if err != nil {
			return nil, fmt.Errorf("list commands: cursor %q: %w: %w", cursor, store.ErrBadCursor, err)
		}
		q, args = q+` AND (started_at, pid) < (?, ?)`, append(args, started, pid)
	}
	rows, err := db.read.QueryContext(ctx, q+` ORDER BY started_at DESC, pid DESC LIMIT ?`, append(args, limit+1)...)
	if err != nil {
		return nil, fmt.Errorf("list commands of %s: %w", sandboxID, err)
	}
	defer rows.Close()
	page := &store.CommandPage{Commands: []*store.CommandRecord{}}
	for rows.Next() {
		c, err := scanCommand(rows)
		if err != nil {
			return nil, fmt.Errorf("list commands of %s: %w", sandboxID, err)
		}
		page.Commands = append(page.Commands, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list commands of %s: %w", sandboxID, err)
	}
	if len(page.Commands) > limit {
		page.Commands = page.Commands[:limit]
		page.Next = commandCursor(page.Commands[limit-1])
	}
	return page, nil
}

// PruneCommands deletes records of commands that ended before olderThan. Records of
// commands still running stay.
func (db *DB) PruneCommands(ctx context.Context, olderThan time.Time) (int64, error) {
	res, err := db.write.ExecContext(ctx, `DELETE FROM commands WHERE ended_at IS NOT NULL AND ended_at < ?`,
		toMicros(olderThan))
	if err != nil {
		return 0, fmt.Errorf("prune commands: %w", err)
	}
	return res.RowsAffected()
}
