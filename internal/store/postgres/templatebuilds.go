package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cove-dev/cove/internal/store"
)

var _ store.TemplateBuilds = (*DB)(nil)

// PutTemplateBuild inserts the build b, or replaces the record with its id.
func (db *DB) PutTemplateBuild(ctx context.Context, b *store.TemplateBuild) error {
	if b.ID == "" || b.Template == "" {
		return fmt.Errorf("%w: template build %q of %q", store.ErrInvalid, b.ID, b.Template)
	}
	_, err := db.pool.Exec(ctx, `INSERT INTO template_builds (id, template, team_id, status, created_at, finished_at, record)
		VALUES ($1, $2, $3, $4, $5, $6, $7)
		ON CONFLICT (id) DO UPDATE SET template = excluded.template, team_id = excluded.team_id, status = excluded.status,
			created_at = excluded.created_at, finished_at = excluded.finished_at, record = excluded.record`,
		b.ID, b.Template, b.TeamID, b.Status, b.CreatedAt.UTC(), b.FinishedAt, string(b.Record))
	if err != nil {
		return fmt.Errorf("put template build %s: %w", b.ID, err)
	}
	return nil
}

const templateBuildColumns = `id, template, team_id, status, created_at, finished_at, record`

func scanTemplateBuild(row pgx.Row) (*store.TemplateBuild, error) {
	var b store.TemplateBuild
	var finished *time.Time
	var record string
	if err := row.Scan(&b.ID, &b.Template, &b.TeamID, &b.Status, &b.CreatedAt, &finished, &record); err != nil {
		return nil, err
	}
	b.CreatedAt, b.Record = utc(b.CreatedAt), []byte(record)
	if finished != nil {
		f := utc(*finished)
		b.FinishedAt = &f
	}
	return &b, nil
}

// GetTemplateBuild returns the build id.
func (db *DB) GetTemplateBuild(ctx context.Context, id string) (*store.TemplateBuild, error) {
	b, err := scanTemplateBuild(db.pool.QueryRow(ctx, `SELECT `+templateBuildColumns+` FROM template_builds WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("template build %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("template build %s: %w", id, err)
	}
	return b, nil
}

// ListTemplateBuilds returns the builds of template ("" for all), oldest first.
func (db *DB) ListTemplateBuilds(ctx context.Context, template string) ([]*store.TemplateBuild, error) {
	rows, err := db.pool.Query(ctx, `SELECT `+templateBuildColumns+` FROM template_builds
		WHERE $1 = '' OR template = $1 ORDER BY created_at, id`, template)
	if err != nil {
		return nil, fmt.Errorf("list template builds: %w", err)
	}
	defer rows.Close()
	var out []*store.TemplateBuild
	for rows.Next() {
		b, err := scanTemplateBuild(rows)
		if err != nil {
			return nil, fmt.Errorf("list template builds: %w", err)
		}
		out = append(out, b)
	}
	return out, rows.Err()
}

// DeleteTemplateBuild deletes the build id and, by the foreign key, its log.
func (db *DB) DeleteTemplateBuild(ctx context.Context, id string) error {
	tag, err := db.pool.Exec(ctx, `DELETE FROM template_builds WHERE id = $1`, id)
	if err != nil {
		return fmt.Errorf("delete template build %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("delete template build %s: %w", id, store.ErrNotFound)
	}
	return nil
}

// AppendBuildLog stores lines of build id's log in one statement.
func (db *DB) AppendBuildLog(ctx context.Context, id string, lines []store.BuildLogLine) error {
	if len(lines) == 0 {
		return nil
	}
	rows := make([][]any, len(lines))
	for i, l := range lines {
		rows[i] = []any{id, l.Seq, l.Time.UTC(), l.Level, l.Step, l.Message}
	}
	_, err := db.pool.CopyFrom(ctx, pgx.Identifier{"template_build_logs"}, []string{"build_id", "seq", "ts", "level", "step", "message"}, pgx.CopyFromRows(rows))
	switch {
	case isCode(err, uniqueViolation):
		return fmt.Errorf("log of template build %s: %w", id, store.ErrConflict)
	case isCode(err, foreignKeyViolation):
		return fmt.Errorf("log of template build %s: %w", id, store.ErrNotFound)
	case err != nil:
		return fmt.Errorf("log of template build %s: %w", id, err)
	}
	return nil
}

// BuildLog returns up to limit lines of build id's log from offset on.
func (db *DB) BuildLog(ctx context.Context, id string, offset, limit int) ([]store.BuildLogLine, error) {
	var lim *int
	if limit > 0 {
		lim = &limit
	}
	rows, err := db.pool.Query(ctx, `SELECT seq, ts, level, step, message FROM template_build_logs
		WHERE build_id = $1 ORDER BY seq LIMIT $2 OFFSET $3`, id, lim, max(offset, 0))
	if err != nil {
		return nil, fmt.Errorf("log of template build %s: %w", id, err)
	}
	defer rows.Close()
	out := []store.BuildLogLine{}
	for rows.Next() {
		var l store.BuildLogLine
		if err := rows.Scan(&l.Seq, &l.Time, &l.Level, &l.Step, &l.Message); err != nil {
			return nil, fmt.Errorf("log of template build %s: %w", id, err)
		}
		l.Time = utc(l.Time)
		out = append(out, l)
	}
	return out, rows.Err()
}

// BuildLogLen counts build id's log lines.
func (db *DB) BuildLogLen(ctx context.Context, id string) (int, error) {
	var n int
	if err := db.pool.QueryRow(ctx, `SELECT count(*) FROM template_build_logs WHERE build_id = $1`, id).Scan(&n); err != nil {
		return 0, fmt.Errorf("log of template build %s: %w", id, err)
	}
	return n, nil
}
