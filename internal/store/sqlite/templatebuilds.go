package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	sqlite3 "modernc.org/sqlite/lib"

	"github.com/cove-dev/cove/internal/store"
)

// PutTemplateBuild inserts the build b, or replaces the record with its id.
func (db *DB) PutTemplateBuild(ctx context.Context, b *store.TemplateBuild) error {
	if b.ID == "" || b.Template == "" {
		return fmt.Errorf("%w: template build %q of %q", store.ErrInvalid, b.ID, b.Template)
	}
	_, err := db.write.ExecContext(ctx, `INSERT INTO template_builds (id, template, team_id, status, created_at, finished_at, record)
		VALUES (?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET template = excluded.template, team_id = excluded.team_id, status = excluded.status,
			created_at = excluded.created_at, finished_at = excluded.finished_at, record = excluded.record`,
		b.ID, b.Template, b.TeamID, b.Status, toMicros(b.CreatedAt), toNullMicros(b.FinishedAt), string(b.Record))
	if err != nil {
		return fmt.Errorf("put template build %s: %w", b.ID, err)
	}
	return nil
}

const templateBuildColumns = `id, template, team_id, status, created_at, finished_at, record`

func scanTemplateBuild(row interface{ Scan(...any) error }) (*store.TemplateBuild, error) {
	var b store.TemplateBuild
	var created int64
	var finished sql.NullInt64
	var record string
	if err := row.Scan(&b.ID, &b.Template, &b.TeamID, &b.Status, &created, &finished, &record); err != nil {
		return nil, err
	}
	b.CreatedAt, b.FinishedAt, b.Record = fromMicros(created), fromNullMicros(finished), []byte(record)
	return &b, nil
}

// GetTemplateBuild returns the build id.
func (db *DB) GetTemplateBuild(ctx context.Context, id string) (*store.TemplateBuild, error) {
	b, err := scanTemplateBuild(db.read.QueryRowContext(ctx, `SELECT `+templateBuildColumns+` FROM template_builds WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("template build %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("template build %s: %w", id, err)
	}
	return b, nil
}

// ListTemplateBuilds returns the builds of template ("" for all), oldest first.
func (db *DB) ListTemplateBuilds(ctx context.Context, template string) ([]*store.TemplateBuild, error) {
	rows, err := db.read.QueryContext(ctx, `SELECT `+templateBuildColumns+` FROM template_builds
		WHERE ? = '' OR template = ? ORDER BY created_at, id`, template, template)
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
	res, err := db.write.ExecContext(ctx, `DELETE FROM template_builds WHERE id = ?`, id)
	if err != nil {
		return fmt.Errorf("delete template build %s: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("delete template build %s: %w", id, store.ErrNotFound)
	}
	return nil
}

// AppendBuildLog stores lines of build id's log in one transaction.
func (db *DB) AppendBuildLog(ctx context.Context, id string, lines []store.BuildLogLine) error {
	if len(lines) == 0 {
		return nil
	}
	err := db.writeTx(ctx, func(tx *sql.Tx) error {
		st, err := tx.PrepareContext(ctx, `INSERT INTO template_build_logs (build_id, seq, ts, level, step, message) VALUES (?, ?, ?, ?, ?, ?)`)
		if err != nil {
			return err
		}
		defer st.Close()
		for _, l := range lines {
			if _, err := st.ExecContext(ctx, id, l.Seq, toMicros(l.Time), l.Level, l.Step, l.Message); err != nil {
				return err
			}
		}
		return nil
	})
	switch {
	case isCode(err, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY):
		return fmt.Errorf("log of template build %s: %w", id, store.ErrConflict)
	case isCode(err, sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY):
		return fmt.Errorf("log of template build %s: %w", id, store.ErrNotFound)
	case err != nil:
		return fmt.Errorf("log of template build %s: %w", id, err)
	}
	return nil
}

// BuildLog returns up to limit lines of build id's log from offset on.
func (db *DB) BuildLog(ctx context.Context, id string, offset, limit int) ([]store.BuildLogLine, error) {
	if limit <= 0 {
		limit = -1 // SQLite's "no limit"
	}
	rows, err := db.read.QueryContext(ctx, `SELECT seq, ts, level, step, message FROM template_build_logs
		WHERE build_id = ? ORDER BY seq LIMIT ? OFFSET ?`, id, limit, max(offset, 0))
	if err != nil {
		return nil, fmt.Errorf("log of template build %s: %w", id, err)
	}
	defer rows.Close()
	out := []store.BuildLogLine{}
	for rows.Next() {
		var l store.BuildLogLine
		var ts int64
		if err := rows.Scan(&l.Seq, &ts, &l.Level, &l.Step, &l.Message); err != nil {
			return nil, fmt.Errorf("log of template build %s: %w", id, err)
		}
		l.Time = fromMicros(ts)
		out = append(out, l)
	}
	return out, rows.Err()
}

// BuildLogLen counts build id's log lines.
func (db *DB) BuildLogLen(ctx context.Context, id string) (int, error) {
	var n int
	if err := db.read.QueryRowContext(ctx, `SELECT count(*) FROM template_build_logs WHERE build_id = ?`, id).Scan(&n); err != nil {
		return 0, fmt.Errorf("log of template build %s: %w", id, err)
	}
	return n, nil
}

var _ store.TemplateBuilds = (*DB)(nil)
