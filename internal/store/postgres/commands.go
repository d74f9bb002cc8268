package postgres

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/sdk/reason"
)

const (
	maxCommandLimit     = 1000
	defaultCommandLimit = 100
)

const commandColumns = `sandbox_id, pid, started_at, team_id, template_id, tag, request_id, "user", command,
	args, cwd, ended_at, duration_us, exit_code, signal, end_cause, signal_request_id, kill_reason,
	stdout_bytes, stderr_bytes, stdout_head, stdout_tail, stderr_head, stderr_tail, truncated, redactions`

// UpsertCommand inserts c or merges it into the stored record with its key: text, times and
// counts c leaves zero, and a nil exit code, args or redactions, keep what is stored.
func (db *DB) UpsertCommand(ctx context.Context, c *store.CommandRecord) error {
	if c.SandboxID == "" || c.PID <= 0 || c.StartedAt.IsZero() {
		return errors.New("upsert command: sandbox, pid and start time are required")
	}
	if _, err := reason.ParseEndCause(string(c.EndCause)); err != nil {
		return fmt.Errorf("upsert command %s/%d: %w", c.SandboxID, c.PID, err)
	}
	args, err := jsonOrNil(c.Args, c.Args == nil)
	if err != nil {
		return fmt.Errorf("upsert command %s/%d: args: %w", c.SandboxID, c.PID, err)
	}
	redactions, err := jsonOrNil(c.Redactions, len(c.Redactions) == 0)
	if err != nil {
		return fmt.Errorf("upsert command %s/%d: redactions: %w", c.SandboxID, c.PID, err)
	}
	var ended *time.Time
	duration := c.Duration
	if !c.EndedAt.IsZero() {
		ended = &c.EndedAt
		if duration == 0 {
			duration = c.EndedAt.Sub(c.StartedAt)
		}
	}
	text := func(col string) string {
		return col + ` = CASE WHEN excluded.` + col + ` != '' THEN excluded.` + col + ` ELSE commands.` + col + ` END`
	}
	num := func(col string) string {
		return col + ` = CASE WHEN excluded.` + col + ` != 0 THEN excluded.` + col + ` ELSE commands.` + col + ` END`
	}
	null := func(col string) string { return col + ` = coalesce(excluded.` + col + `, commands.` + col + `)` }
	set := []string{text("team_id"), text("template_id"), text("tag"), text("request_id"), text(`"user"`),
		text("command"), null("args"), text("cwd"), null("ended_at"), num("duration_us"), null("exit_code"),
		text("signal"), text("end_cause"), text("signal_request_id"), text("kill_reason"),
		num("stdout_bytes"), num("stderr_bytes"), text("stdout_head"), text("stdout_tail"),
		text("stderr_head"), text("stderr_tail"), `truncated = excluded.truncated OR commands.truncated`,
		null("redactions")}
	_, err = db.pool.Exec(ctx, `INSERT INTO commands (`+commandColumns+`) VALUES (`+placeholders(1, 26)+`)
		ON CONFLICT (sandbox_id, pid, started_at) DO UPDATE SET `+strings.Join(set, ", "),
		c.SandboxID, c.PID, c.StartedAt, c.TeamID, c.TemplateID, c.Tag, c.RequestID, c.User,
		c.Command, args, c.Cwd, ended, duration.Microseconds(), c.ExitCode, c.Signal, string(c.EndCause),
		c.SignalRequestID, string(c.KillReason), c.StdoutBytes, c.StderrBytes, c.StdoutHead, c.StdoutTail,
		c.StderrHead, c.StderrTail, c.Truncated, redactions)
	if err != nil {
		return fmt.Errorf("upsert command %s/%d: %w", c.SandboxID, c.PID, err)
	}
	return nil
}

func scanCommand(row pgx.Row) (*store.CommandRecord, error) {
	c := &store.CommandRecord{}
	var duration int64
	var ended *time.Time
	var args, redactions []byte
	var endCause, killReason string
	if err := row.Scan(&c.SandboxID, &c.PID, &c.StartedAt, &c.TeamID, &c.TemplateID, &c.Tag, &c.RequestID,
		&c.User, &c.Command, &args, &c.Cwd, &ended, &duration, &c.ExitCode, &c.Signal, &endCause,
		&c.SignalRequestID, &killReason, &c.StdoutBytes, &c.StderrBytes, &c.StdoutHead, &c.StdoutTail,
		&c.StderrHead, &c.StderrTail, &c.Truncated, &redactions); err != nil {
		return nil, err
	}
	c.StartedAt, c.KillReason = utc(c.StartedAt), reason.KillReason(killReason)
	var err error
	if c.EndCause, err = reason.ParseEndCause(endCause); err != nil {
		return nil, fmt.Errorf("command %s/%d: %w", c.SandboxID, c.PID, err)
	}
	if ended != nil {
		c.EndedAt = ended.UTC()
	}
	c.Duration = time.Duration(duration) * time.Microsecond
	if args != nil {
		if err := json.Unmarshal(args, &c.Args); err != nil {
			return nil, fmt.Errorf("command %s/%d args: %w", c.SandboxID, c.PID, err)
		}
	}
	if redactions != nil {
		if err := json.Unmarshal(redactions, &c.Redactions); err != nil {
			return nil, fmt.Errorf("command %s/%d redactions: %w", c.SandboxID, c.PID, err)
		}
	}
	return c, nil
}

// GetCommand returns the record of pid started at startedAt, or pid's latest when startedAt
// is zero.
func (db *DB) GetCommand(ctx context.Context, sandboxID string, pid int, startedAt time.Time) (*store.CommandRecord, error) {
	q, args := `SELECT `+commandColumns+` FROM commands WHERE sandbox_id = $1 AND pid = $2`, []any{sandboxID, pid}
	if !startedAt.IsZero() {
		q, args = q+` AND started_at = $3`, append(args, startedAt)
	}
	c, err := scanCommand(db.pool.QueryRow(ctx, q+` ORDER BY started_at DESC LIMIT 1`, args...))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("command %d of sandbox %s: %w", pid, sandboxID, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get command %d of sandbox %s: %w", pid, sandboxID, err)
	}
	return c, nil
}

// A command cursor is the (start, pid) of a page's last record: base64url("<unix µs>:<pid>"),
// as the SQLite store writes it.
func commandCursor(c *store.CommandRecord) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(c.StartedAt.UnixMicro(), 10) + ":" + strconv.Itoa(c.PID)))
}

func parseCommandCursor(s string) (time.Time, int, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return time.Time{}, 0, errors.New("not base64url")
	}
	us, p, ok := strings.Cut(string(b), ":")
	started, err1 := strconv.ParseInt(us, 10, 64)
	pid, err2 := strconv.Atoi(p)
	if !ok || err1 != nil || err2 != nil {
		return time.Time{}, 0, errors.New("malformed")
	}
	return time.UnixMicro(started), pid, nil
}

// ListCommands returns the sandbox's records newest first, a page at a time.
func (db *DB) ListCommands(ctx context.Context, sandboxID string, limit int, cursor string) (*store.CommandPage, error) {
	if limit <= 0 {
		limit = defaultCommandLimit
	}
	limit = min(limit, maxCommandLimit)
	q, args := `SELECT `+commandColumns+` FROM commands WHERE sandbox_id = $1`, []any{sandboxID}
	if cursor != "" {
		started, pid, err := parseCommandCursor(cursor)
		if err != nil {
			return nil, fmt.Errorf("list commands: cursor %q: %w: %w", cursor, store.ErrBadCursor, err)
		}
		q, args = q+` AND (started_at, pid) < ($2, $3)`, append(args, started, pid)
	}
	args = append(args, limit+1)
	rows, err := db.pool.Query(ctx, q+` ORDER BY started_at DESC, pid DESC LIMIT $`+strconv.Itoa(len(args)), args...)
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

// PruneCommands deletes records of commands that ended before olderThan.
func (db *DB) PruneCommands(ctx context.Context, olderThan time.Time) (int64, error) {
	tag, err := db.pool.Exec(ctx, `DELETE FROM commands WHERE ended_at IS NOT NULL AND ended_at < $1`, olderThan)
	if err != nil {
		return 0, fmt.Errorf("prune commands: %w", err)
	}
	return tag.RowsAffected(), nil
}

// CloseOpenCommands ends the sandbox's records still open, with reason.EndSandboxKilled.
func (db *DB) CloseOpenCommands(ctx context.Context, sandboxID string, at time.Time, killReason string) (int64, error) {
	tag, err := db.pool.Exec(ctx, `UPDATE commands SET ended_at = $1,
		duration_us = greatest(0, (extract(epoch FROM $1::timestamptz - started_at) * 1000000)::bigint),
		end_cause = $2, kill_reason = $3 WHERE sandbox_id = $4 AND ended_at IS NULL`,
		at, string(reason.EndSandboxKilled), killReason, sandboxID)
	if err != nil {
		return 0, fmt.Errorf("close open commands of %s: %w", sandboxID, err)
	}
	return tag.RowsAffected(), nil
}
