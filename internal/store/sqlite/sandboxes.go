package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	sqlite3 "modernc.org/sqlite/lib"

	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/sdk/reason"
)

// Page sizes for ListSandboxes: Limit is clamped to 1..maxLimit, 0 meaning maxLimit.
const maxLimit = 100

// sandboxColumns lists the sandboxes columns in the order scanSandbox and sandboxArgs use.
const sandboxColumns = `id, team_id, template_id, alias, state, metadata, env_var_names,
	cpu_count, memory_mb, disk_size_mb, envd_version, envd_access_token,
	secure, auto_pause, auto_resume, allow_internet,
	started_at, end_at, paused_at, killed_at,
	kill_reason, kill_request_id, kill_api_key_id, created_by, updated_at,
	auto_pause_kind, pause_kind, node, runtime`

var liveStates = []store.SandboxState{store.StateRunning, store.StatePaused}

func validState(s store.SandboxState) bool {
	return s == store.StateRunning || s == store.StatePaused || s == store.StateKilled
}

// sandboxArgs returns sb's column values in sandboxColumns order, its token sealed.
func (db *DB) sandboxArgs(sb *store.Sandbox) ([]any, error) {
	if !validState(sb.State) {
		return nil, fmt.Errorf("unknown state %q", sb.State)
	}
	metadata, err := jsonOrNull(sb.Metadata, sb.Metadata == nil)
	if err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	envVarNames, err := jsonOrNull(sb.EnvVarNames, sb.EnvVarNames == nil)
	if err != nil {
		return nil, fmt.Errorf("env var names: %w", err)
	}
	token, err := db.sealText(tokenName(sb.ID), sb.EnvdAccessToken)
	if err != nil {
		return nil, err
	}
	return []any{
		sb.ID, sb.TeamID, sb.TemplateID, sb.Alias, string(sb.State), metadata, envVarNames,
		sb.CPUCount, sb.MemoryMB, sb.DiskSizeMB, sb.EnvdVersion, token,
		sb.Secure, sb.AutoPause, sb.AutoResume, sb.AllowInternet,
		toMicros(sb.StartedAt), toMicros(sb.EndAt), toNullMicros(sb.PausedAt), toNullMicros(sb.KilledAt),
		string(sb.KillReason), sb.KillRequestID, sb.KillAPIKeyID, sb.CreatedBy, toMicros(sb.UpdatedAt),
		string(sb.AutoPauseKind), string(sb.PauseKind), sb.Node, sb.Runtime,
	}, nil
}

// jsonOrNull encodes v as JSON, or NULL when isNil, so nil and empty survive the round trip.
func jsonOrNull(v any, isNil bool) (sql.NullString, error) {
	if isNil {
		return sql.NullString{}, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return sql.NullString{}, err
	}
	return sql.NullString{String: string(b), Valid: true}, nil
}

type scanner interface{ Scan(dest ...any) error }

func (db *DB) scanSandbox(row scanner) (*store.Sandbox, error) {
	sb := &store.Sandbox{}
	var state, killReason, autoPauseKind, pauseKind string
	var metadata, envVarNames sql.NullString
	var started, end, updated int64
	var paused, killed sql.NullInt64
	if err := row.Scan(
		&sb.ID, &sb.TeamID, &sb.TemplateID, &sb.Alias, &state, &metadata, &envVarNames,
		&sb.CPUCount, &sb.MemoryMB, &sb.DiskSizeMB, &sb.EnvdVersion, &sb.EnvdAccessToken,
		&sb.Secure, &sb.AutoPause, &sb.AutoResume, &sb.AllowInternet,
		&started, &end, &paused, &killed,
		&killReason, &sb.KillRequestID, &sb.KillAPIKeyID, &sb.CreatedBy, &updated,
		&autoPauseKind, &pauseKind, &sb.Node, &sb.Runtime,
	); err != nil {
		return nil, err
	}
	sb.State, sb.KillReason = store.SandboxState(state), reason.KillReason(killReason)
	sb.AutoPauseKind, sb.PauseKind = reason.PauseKind(autoPauseKind), reason.PauseKind(pauseKind)
	if metadata.Valid {
		if err := json.Unmarshal([]byte(metadata.String), &sb.Metadata); err != nil {
			return nil, fmt.Errorf("sandbox %s metadata: %w", sb.ID, err)
		}
	}
	if envVarNames.Valid {
		if err := json.Unmarshal([]byte(envVarNames.String), &sb.EnvVarNames); err != nil {
			return nil, fmt.Errorf("sandbox %s env var names: %w", sb.ID, err)
		}
	}
	sb.StartedAt, sb.EndAt, sb.UpdatedAt = fromMicros(started), fromMicros(end), fromMicros(updated)
	sb.PausedAt, sb.KilledAt = fromNullMicros(paused), fromNullMicros(killed)
	token, err := db.openText(tokenName(sb.ID), sb.EnvdAccessToken)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", sb.ID, err)
	}
	sb.EnvdAccessToken = token
	return sb, nil
}

// InsertSandbox stores a new sandbox record. store.ErrConflict when one with sb.ID exists,
// store.ErrNotFound when its team does not.
func (db *DB) InsertSandbox(ctx context.Context, sb *store.Sandbox) error {
	args, err := db.sandboxArgs(sb)
	if err != nil {
		return fmt.Errorf("insert sandbox %s: %w", sb.ID, err)
	}
	_, err = db.write.ExecContext(ctx, `INSERT INTO sandboxes (`+sandboxColumns+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, args...)
	switch {
	case isCode(err, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY):
		return fmt.Errorf("insert sandbox %s: %w", sb.ID, store.ErrConflict)
	case isCode(err, sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY):
		return fmt.Errorf("insert sandbox %s: team %s: %w", sb.ID, sb.TeamID, store.ErrNotFound)
	case err != nil:
		return fmt.Errorf("insert sandbox %s: %w", sb.ID, err)
	}
	return nil
}

// UpdateSandbox replaces the record with sb's id; store.ErrNotFound when there is none.
func (db *DB) UpdateSandbox(ctx context.Context, sb *store.Sandbox) error {
	args, err := db.sandboxArgs(sb)
	if err != nil {
		return fmt.Errorf("update sandbox %s: %w", sb.ID, err)
	}
	// Every column but id, in sandboxColumns order, then id for the WHERE.
	res, err := db.write.ExecContext(ctx, `UPDATE sandboxes SET
		team_id = ?, template_id = ?, alias = ?, state = ?, metadata = ?, env_var_names = ?,
		cpu_count = ?, memory_mb = ?, disk_size_mb = ?, envd_version = ?, envd_access_token = ?,
		secure = ?, auto_pause = ?, auto_resume = ?, allow_internet = ?,
		started_at = ?, end_at = ?, paused_at = ?, killed_at = ?,
		kill_reason = ?, kill_request_id = ?, kill_api_key_id = ?, created_by = ?, updated_at = ?,
		auto_pause_kind = ?, pause_kind = ?, node = ?, runtime = ?
		WHERE id = ?`, append(args[1:], sb.ID)...)
	if isCode(err, sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY) {
		return fmt.Errorf("update sandbox %s: team %s: %w", sb.ID, sb.TeamID, store.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("update sandbox %s: %w", sb.ID, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("update sandbox %s: %w", sb.ID, err)
	} else if n == 0 {
		return fmt.Errorf("update sandbox %s: %w", sb.ID, store.ErrNotFound)
	}
	return nil
}

// GetSandbox returns sandbox id, whatever its state; store.ErrNotFound when there is none.
func (db *DB) GetSandbox(ctx context.Context, id string) (*store.Sandbox, error) {
	sb, err := db.scanSandbox(db.read.QueryRowContext(ctx,
		`SELECT `+sandboxColumns+` FROM sandboxes WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("sandbox %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get sandbox %s: %w", id, err)
	}
	return sb, nil
}

// ListSandboxes returns one page of the sandboxes matching f, ordered by start time then
// id. Pages follow a cursor, not an offset, so a sandbox created between two pages is never
// seen twice and none already there is skipped.
func (db *DB) ListSandboxes(ctx context.Context, f store.SandboxFilter) (*store.SandboxPage, error) {
	limit := f.Limit
	if limit <= 0 || limit > maxLimit {
		limit = maxLimit
	}
	var where []string
	var args []any
	if f.TeamID != "" {
		where, args = append(where, "team_id = ?"), append(args, f.TeamID)
	}
	states := f.States
	if len(states) == 0 {
		states = liveStates
	}
	where = append(where, "state IN ("+strings.TrimSuffix(strings.Repeat("?, ", len(states)), ", ")+")")
	for _, s := range states {
		args = append(args, string(s))
	}
	// json_each yields each key decoded, so a key with dots, quotes or brackets matches as
	// itself; a JSON path built from the key would have to escape them.
	keys := make([]string, 0, len(f.Metadata))
	for k := range f.Metadata {
		keys = append(keys, k)
	}
	slices.Sort(keys) // the same filter keys make the same SQL text
	for _, k := range keys {
		where = append(where, `EXISTS (SELECT 1 FROM json_each(sandboxes.metadata) AS m
			WHERE m.key = ? AND m.type = 'text' AND m.value = ?)`)
		args = append(args, k, f.Metadata[k])
	}
	if !f.StartedAfter.IsZero() {
		where, args = append(where, "started_at >= ?"), append(args, toMicros(f.StartedAfter))
	}
	if f.Template != "" {
		where, args = append(where, "(template_id = ? OR alias = ?)"), append(args, f.Template, f.Template)
	}
	order, err := store.ParseListOrder(string(f.Order))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", store.ErrInvalid, err)
	}
	cmp, dir := ">", "ASC"
	if order == store.OrderDesc {
		cmp, dir = "<", "DESC"
	}
	filter := strings.Join(where, " AND ")

	pageWhere, pageArgs := filter, slices.Clone(args)
	if f.Next != "" {
		c, err := store.ParseSandboxCursor(f.Next)
		if err != nil {
			return nil, fmt.Errorf("%w: nextToken %q is not a token this server returned (%v)", store.ErrInvalid, f.Next, err)
		}
		if c.Order != order {
			return nil, fmt.Errorf("%w: nextToken %q continues a listing in order %s, not %s", store.ErrInvalid, f.Next, c.Order, order)
		}
		pageWhere += " AND (started_at, id) " + cmp + " (?, ?)"
		pageArgs = append(pageArgs, toMicros(c.StartedAt), c.ID)
	}

	// One read transaction: the page and the total come from the same snapshot.
	tx, err := db.read.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	defer tx.Rollback()
	page := &store.SandboxPage{}
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM sandboxes WHERE `+filter, args...).Scan(&page.Total); err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	// One more row than the page tells whether there is a next page.
	sbs, err := db.querySandboxes(ctx, tx, `SELECT `+sandboxColumns+` FROM sandboxes WHERE `+pageWhere+
		` ORDER BY started_at `+dir+`, id `+dir+` LIMIT ?`, append(pageArgs, limit+1)...)
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	if len(sbs) > limit {
		sbs = sbs[:limit]
		last := sbs[limit-1]
		page.Next = store.SandboxCursor{Order: order, StartedAt: last.StartedAt, ID: last.ID}.String()
	}
	page.Sandboxes = sbs
	return page, nil
}

// LiveSandboxes returns every running or paused sandbox of every team, oldest first.
func (db *DB) LiveSandboxes(ctx context.Context) ([]*store.Sandbox, error) {
	sbs, err := db.querySandboxes(ctx, db.read, `SELECT `+sandboxColumns+` FROM sandboxes
		WHERE state IN (?, ?) ORDER BY started_at, id`, string(store.StateRunning), string(store.StatePaused))
	if err != nil {
		return nil, fmt.Errorf("live sandboxes: %w", err)
	}
	return sbs, nil
}

type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

func (db *DB) querySandboxes(ctx context.Context, q querier, query string, args ...any) ([]*store.Sandbox, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	sbs := []*store.Sandbox{}
	for rows.Next() {
		sb, err := db.scanSandbox(rows)
		if err != nil {
			return nil, err
		}
		sbs = append(sbs, sb)
	}
	return sbs, rows.Err()
}
