package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/sdk/reason"
)

// maxLimit bounds a listing's page; 0 means maxLimit.
const maxLimit = 100

const sandboxColumns = `id, team_id, template_id, alias, state, metadata, env_var_names,
	cpu_count, memory_mb, disk_size_mb, envd_version, envd_access_token,
	secure, auto_pause, auto_resume, allow_internet,
	started_at, end_at, paused_at, killed_at,
	kill_reason, kill_request_id, kill_api_key_id, created_by, updated_at,
	auto_pause_kind, pause_kind, node, runtime`

func validState(s store.SandboxState) bool {
	return s == store.StateRunning || s == store.StatePaused || s == store.StateKilled
}

// jsonOrNil encodes v as JSON, or NULL when isNil, so nil and empty survive the round trip.
func jsonOrNil(v any, isNil bool) ([]byte, error) {
	if isNil {
		return nil, nil
	}
	return json.Marshal(v)
}

// sandboxArgs returns sb's column values in sandboxColumns order, its token sealed.
func (db *DB) sandboxArgs(sb *store.Sandbox) ([]any, error) {
	if !validState(sb.State) {
		return nil, fmt.Errorf("unknown state %q", sb.State)
	}
	metadata, err := jsonOrNil(sb.Metadata, sb.Metadata == nil)
	if err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	envVarNames, err := jsonOrNil(sb.EnvVarNames, sb.EnvVarNames == nil)
	if err != nil {
		return nil, fmt.Errorf("env var names: %w", err)
	}
	token, err := db.sealText(store.TokenSealName(sb.ID), sb.EnvdAccessToken)
	if err != nil {
		return nil, err
	}
	return []any{
		sb.ID, sb.TeamID, sb.TemplateID, sb.Alias, string(sb.State), metadata, envVarNames,
		sb.CPUCount, sb.MemoryMB, sb.DiskSizeMB, sb.EnvdVersion, token,
		sb.Secure, sb.AutoPause, sb.AutoResume, sb.AllowInternet,
		sb.StartedAt, sb.EndAt, sb.PausedAt, sb.KilledAt,
		string(sb.KillReason), sb.KillRequestID, sb.KillAPIKeyID, sb.CreatedBy, sb.UpdatedAt,
		string(sb.AutoPauseKind), string(sb.PauseKind), sb.Node, sb.Runtime,
	}, nil
}

func (db *DB) scanSandbox(row pgx.Row) (*store.Sandbox, error) {
	sb := &store.Sandbox{}
	var state, killReason, autoPauseKind, pauseKind string
	var metadata, envVarNames []byte
	if err := row.Scan(
		&sb.ID, &sb.TeamID, &sb.TemplateID, &sb.Alias, &state, &metadata, &envVarNames,
		&sb.CPUCount, &sb.MemoryMB, &sb.DiskSizeMB, &sb.EnvdVersion, &sb.EnvdAccessToken,
		&sb.Secure, &sb.AutoPause, &sb.AutoResume, &sb.AllowInternet,
		&sb.StartedAt, &sb.EndAt, &sb.PausedAt, &sb.KilledAt,
		&killReason, &sb.KillRequestID, &sb.KillAPIKeyID, &sb.CreatedBy, &sb.UpdatedAt,
		&autoPauseKind, &pauseKind, &sb.Node, &sb.Runtime,
	); err != nil {
		return nil, err
	}
	sb.State, sb.KillReason = store.SandboxState(state), reason.KillReason(killReason)
	sb.AutoPauseKind, sb.PauseKind = reason.PauseKind(autoPauseKind), reason.PauseKind(pauseKind)
	if metadata != nil {
		if err := json.Unmarshal(metadata, &sb.Metadata); err != nil {
			return nil, fmt.Errorf("sandbox %s metadata: %w", sb.ID, err)
		}
	}
	if envVarNames != nil {
		if err := json.Unmarshal(envVarNames, &sb.EnvVarNames); err != nil {
			return nil, fmt.Errorf("sandbox %s env var names: %w", sb.ID, err)
		}
	}
	sb.StartedAt, sb.EndAt, sb.UpdatedAt = utc(sb.StartedAt), utc(sb.EndAt), utc(sb.UpdatedAt)
	sb.PausedAt, sb.KilledAt = utcPtr(sb.PausedAt), utcPtr(sb.KilledAt)
	token, err := db.openText(store.TokenSealName(sb.ID), sb.EnvdAccessToken)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", sb.ID, err)
	}
	sb.EnvdAccessToken = token
	return sb, nil
}

// placeholders returns "$from, $from+1, … " for n values.
func placeholders(from, n int) string {
	ps := make([]string, n)
	for i := range ps {
		ps[i] = "$" + strconv.Itoa(from+i)
	}
	return strings.Join(ps, ", ")
}

// InsertSandbox stores a new sandbox record. store.ErrConflict when one with sb.ID exists,
// store.ErrNotFound when its team does not.
func (db *DB) InsertSandbox(ctx context.Context, sb *store.Sandbox) error {
	args, err := db.sandboxArgs(sb)
	if err != nil {
		return fmt.Errorf("insert sandbox %s: %w", sb.ID, err)
	}
	_, err = db.pool.Exec(ctx, `INSERT INTO sandboxes (`+sandboxColumns+`) VALUES (`+placeholders(1, len(args))+`)`, args...)
	switch {
	case isCode(err, uniqueViolation):
		return fmt.Errorf("insert sandbox %s: %w", sb.ID, store.ErrConflict)
	case isCode(err, foreignKeyViolation):
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
	cols := strings.Split(sandboxColumns, ",")
	sets := make([]string, 0, len(cols)-1)
	for i, c := range cols[1:] {
		sets = append(sets, strings.TrimSpace(c)+" = $"+strconv.Itoa(i+2))
	}
	tag, err := db.pool.Exec(ctx, `UPDATE sandboxes SET `+strings.Join(sets, ", ")+` WHERE id = $1`, args...)
	if isCode(err, foreignKeyViolation) {
		return fmt.Errorf("update sandbox %s: team %s: %w", sb.ID, sb.TeamID, store.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("update sandbox %s: %w", sb.ID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("update sandbox %s: %w", sb.ID, store.ErrNotFound)
	}
	return nil
}

// GetSandbox returns sandbox id, whatever its state; store.ErrNotFound when there is none.
func (db *DB) GetSandbox(ctx context.Context, id string) (*store.Sandbox, error) {
	sb, err := db.scanSandbox(db.pool.QueryRow(ctx, `SELECT `+sandboxColumns+` FROM sandboxes WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("sandbox %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get sandbox %s: %w", id, err)
	}
	return sb, nil
}

type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

func (db *DB) querySandboxes(ctx context.Context, q querier, query string, args ...any) ([]*store.Sandbox, error) {
	rows, err := q.Query(ctx, query, args...)
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

// ListSandboxes returns one page of the sandboxes matching f, ordered by start time then id,
// following a cursor, so a sandbox created between two pages is never seen twice.
func (db *DB) ListSandboxes(ctx context.Context, f store.SandboxFilter) (*store.SandboxPage, error) {
	limit := f.Limit
	if limit <= 0 || limit > maxLimit {
		limit = maxLimit
	}
	var where []string
	var args []any
	arg := func(v any) string { args = append(args, v); return "$" + strconv.Itoa(len(args)) }
	if f.TeamID != "" {
		where = append(where, "team_id = "+arg(f.TeamID))
	}
	states := f.States
	if len(states) == 0 {
		states = []store.SandboxState{store.StateRunning, store.StatePaused}
	}
	names := make([]string, len(states))
	for i, s := range states {
		names[i] = string(s)
	}
	where = append(where, "state = ANY("+arg(names)+")")
	keys := make([]string, 0, len(f.Metadata))
	for k := range f.Metadata {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		// Containment compares the key and the string value as themselves: dots, quotes
		// and brackets in a key need no escaping.
		where = append(where, "metadata @> jsonb_build_object("+arg(k)+"::text, "+arg(f.Metadata[k])+"::text)")
	}
	if !f.StartedAfter.IsZero() {
		where = append(where, "started_at >= "+arg(f.StartedAfter))
	}
	if f.Template != "" {
		p := arg(f.Template)
		where = append(where, "(template_id = "+p+" OR alias = "+p+")")
	}
	order, err := store.ParseListOrder(string(f.Order))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", store.ErrInvalid, err)
	}
	cmp, dir := ">", "ASC"
	if order == store.OrderDesc {
		cmp, dir = "<", "DESC"
	}
	filter, filterArgs := strings.Join(where, " AND "), slices.Clone(args)
	pageWhere := filter
	if f.Next != "" {
		c, err := store.ParseSandboxCursor(f.Next)
		if err != nil {
			return nil, fmt.Errorf("%w: nextToken %q is not a token this server returned (%v)", store.ErrInvalid, f.Next, err)
		}
		if c.Order != order {
			return nil, fmt.Errorf("%w: nextToken %q continues a listing in order %s, not %s", store.ErrInvalid, f.Next, c.Order, order)
		}
		pageWhere += " AND (started_at, id) " + cmp + " (" + arg(c.StartedAt) + ", " + arg(c.ID) + ")"
	}
	lim := arg(limit + 1)
	page := &store.SandboxPage{}
	// One snapshot: the page and the total agree.
	err = pgx.BeginTxFunc(ctx, db.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly, IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM sandboxes WHERE `+filter, filterArgs...).Scan(&page.Total); err != nil {
			return err
		}
		sbs, err := db.querySandboxes(ctx, tx, `SELECT `+sandboxColumns+` FROM sandboxes WHERE `+pageWhere+
			` ORDER BY started_at `+dir+`, id `+dir+` LIMIT `+lim, args...)
		page.Sandboxes = sbs
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	if len(page.Sandboxes) > limit {
		page.Sandboxes = page.Sandboxes[:limit]
		last := page.Sandboxes[limit-1]
		page.Next = store.SandboxCursor{Order: order, StartedAt: last.StartedAt, ID: last.ID}.String()
	}
	return page, nil
}

// LiveSandboxes returns every running or paused sandbox of every team, oldest first.
func (db *DB) LiveSandboxes(ctx context.Context) ([]*store.Sandbox, error) {
	sbs, err := db.querySandboxes(ctx, db.pool, `SELECT `+sandboxColumns+` FROM sandboxes
		WHERE state IN ('running', 'paused') ORDER BY started_at, id`)
	if err != nil {
		return nil, fmt.Errorf("live sandboxes: %w", err)
	}
	return sbs, nil
}

// SandboxSpans implements store.Activity.
func (db *DB) SandboxSpans(ctx context.Context, teamID string, from, to time.Time) ([]store.Span, error) {
	rows, err := db.pool.Query(ctx, `SELECT started_at, killed_at FROM sandboxes
		WHERE team_id = $1 AND started_at < $2 AND (killed_at IS NULL OR killed_at >= $3)
		ORDER BY started_at`, teamID, to, from)
	if err != nil {
		return nil, fmt.Errorf("sandbox spans: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.Span, error) {
		var s store.Span
		var killed *time.Time
		err := row.Scan(&s.Started, &killed)
		s.Started = utc(s.Started)
		if killed != nil {
			s.Killed = killed.UTC()
		}
		return s, err
	})
	if err != nil {
		return nil, fmt.Errorf("sandbox spans: %w", err)
	}
	return out, nil
}
