package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	sqlite3 "modernc.org/sqlite/lib"

	"github.com/cove-dev/cove/internal/store"
)

var _ store.Templates = (*DB)(nil)

// PutTemplate stores r under its name and tag.
func (db *DB) PutTemplate(ctx context.Context, r *store.TemplateRecord, replace bool) error {
	if r.Name == "" {
		return fmt.Errorf("%w: a template record without a name", store.ErrInvalid)
	}
	q := `INSERT INTO templates (name, tag, team_id, build_id, created_at, record) VALUES (?, ?, ?, ?, ?, ?)`
	if replace {
		q += ` ON CONFLICT (name, tag) DO UPDATE SET team_id = excluded.team_id, build_id = excluded.build_id,
			created_at = excluded.created_at, record = excluded.record`
	}
	_, err := db.write.ExecContext(ctx, q, r.Name, r.Tag, r.TeamID, r.BuildID, toMicros(r.CreatedAt), string(r.Record))
	if isCode(err, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY) {
		return fmt.Errorf("put template %s: %w", templateRef(r.Name, r.Tag), store.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("put template %s: %w", templateRef(r.Name, r.Tag), err)
	}
	return nil
}

// templateRef is name or name:tag, for errors.
func templateRef(name, tag string) string {
	if tag == "" {
		return name
	}
	return name + ":" + tag
}

func scanTemplate(row interface{ Scan(...any) error }) (*store.TemplateRecord, error) {
	var r store.TemplateRecord
	var created int64
	var record string
	if err := row.Scan(&r.Name, &r.Tag, &r.TeamID, &r.BuildID, &created, &record); err != nil {
		return nil, err
	}
	r.CreatedAt, r.Record = fromMicros(created), []byte(record)
	return &r, nil
}

const templateColumns = `name, tag, team_id, build_id, created_at, record`

// GetTemplate returns the record of name and tag.
func (db *DB) GetTemplate(ctx context.Context, name, tag string) (*store.TemplateRecord, error) {
	r, err := scanTemplate(db.read.QueryRowContext(ctx, `SELECT `+templateColumns+` FROM templates WHERE name = ? AND tag = ?`, name, tag))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("template %s: %w", templateRef(name, tag), store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("template %s: %w", templateRef(name, tag), err)
	}
	return r, nil
}

func (db *DB) listTemplates(ctx context.Context, q string, args ...any) ([]*store.TemplateRecord, error) {
	rows, err := db.read.QueryContext(ctx, `SELECT `+templateColumns+` FROM templates `+q, args...)
	if err != nil {
		return nil, fmt.Errorf("list templates: %w", err)
	}
	defer rows.Close()
	var out []*store.TemplateRecord
	for rows.Next() {
		r, err := scanTemplate(rows)
		if err != nil {
			return nil, fmt.Errorf("list templates: %w", err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// ListTemplates returns every template's own record, by name.
func (db *DB) ListTemplates(ctx context.Context) ([]*store.TemplateRecord, error) {
	return db.listTemplates(ctx, `WHERE tag = '' ORDER BY name`)
}

// ListTemplateTags returns the tags of name, by tag.
func (db *DB) ListTemplateTags(ctx context.Context, name string) ([]*store.TemplateRecord, error) {
	return db.listTemplates(ctx, `WHERE name = ? AND tag != '' ORDER BY tag`, name)
}

// DeleteTemplate deletes name's record and its tags'.
func (db *DB) DeleteTemplate(ctx context.Context, name string) error {
	return db.deleteOne(ctx, "delete template "+name, `DELETE FROM templates WHERE name = ?`, name)
}

// DeleteTemplateTag deletes one tag of name.
func (db *DB) DeleteTemplateTag(ctx context.Context, name, tag string) error {
	if tag == "" {
		return fmt.Errorf("%w: delete tag of %s: no tag", store.ErrInvalid, name)
	}
	return db.deleteOne(ctx, "delete template "+templateRef(name, tag), `DELETE FROM templates WHERE name = ? AND tag = ?`, name, tag)
}

// deleteOne runs a delete, ErrNotFound when it deleted nothing.
func (db *DB) deleteOne(ctx context.Context, what, q string, args ...any) error {
	res, err := db.write.ExecContext(ctx, q, args...)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("%s: %w", what, store.ErrNotFound)
	}
	return nil
}

// PutTemplateLayer stores l.
func (db *DB) PutTemplateLayer(ctx context.Context, l *store.TemplateLayer) error {
	if l.Key == "" {
		return fmt.Errorf("%w: a layer without a key", store.ErrInvalid)
	}
	_, err := db.write.ExecContext(ctx, `INSERT INTO template_layers (key, created_at, record) VALUES (?, ?, ?)`, l.Key, toMicros(l.CreatedAt), string(l.Record))
	if isCode(err, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY) {
		return fmt.Errorf("put layer %s: %w", l.Key, store.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("put layer %s: %w", l.Key, err)
	}
	return nil
}

func scanLayer(row interface{ Scan(...any) error }) (*store.TemplateLayer, error) {
	var l store.TemplateLayer
	var created int64
	var record string
	if err := row.Scan(&l.Key, &created, &record); err != nil {
		return nil, err
	}
	l.CreatedAt, l.Record = fromMicros(created), []byte(record)
	return &l, nil
}

// GetTemplateLayer returns the layer key.
func (db *DB) GetTemplateLayer(ctx context.Context, key string) (*store.TemplateLayer, error) {
	l, err := scanLayer(db.read.QueryRowContext(ctx, `SELECT key, created_at, record FROM template_layers WHERE key = ?`, key))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("layer %s: %w", key, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("layer %s: %w", key, err)
	}
	return l, nil
}

// ListTemplateLayers returns every layer, by key.
func (db *DB) ListTemplateLayers(ctx context.Context) ([]*store.TemplateLayer, error) {
	rows, err := db.read.QueryContext(ctx, `SELECT key, created_at, record FROM template_layers ORDER BY key`)
	if err != nil {
		return nil, fmt.Errorf("list layers: %w", err)
	}
	defer rows.Close()
	var out []*store.TemplateLayer
	for rows.Next() {
		l, err := scanLayer(rows)
		if err != nil {
			return nil, fmt.Errorf("list layers: %w", err)
		}
		out = append(out, l)
	}
	return out, rows.Err()
}

// DeleteTemplateLayer deletes the layer key.
func (db *DB) DeleteTemplateLayer(ctx context.Context, key string) error {
	return db.deleteOne(ctx, "delete layer "+key, `DELETE FROM template_layers WHERE key = ?`, key)
}
