package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/cove-dev/cove/internal/store"
)

var _ store.Templates = (*DB)(nil)

// PutTemplate stores r under its name and tag.
func (db *DB) PutTemplate(ctx context.Context, r *store.TemplateRecord, replace bool) error {
	if r.Name == "" {
		return fmt.Errorf("%w: a template record without a name", store.ErrInvalid)
	}
	q := `INSERT INTO templates (name, tag, team_id, build_id, created_at, record) VALUES ($1, $2, $3, $4, $5, $6)`
	if replace {
		q += ` ON CONFLICT (name, tag) DO UPDATE SET team_id = excluded.team_id, build_id = excluded.build_id,
			created_at = excluded.created_at, record = excluded.record`
	}
	_, err := db.pool.Exec(ctx, q, r.Name, r.Tag, r.TeamID, r.BuildID, r.CreatedAt.UTC(), string(r.Record))
	if isCode(err, uniqueViolation) {
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

func scanTemplate(row pgx.Row) (*store.TemplateRecord, error) {
	var r store.TemplateRecord
	var record string
	if err := row.Scan(&r.Name, &r.Tag, &r.TeamID, &r.BuildID, &r.CreatedAt, &record); err != nil {
		return nil, err
	}
	r.CreatedAt, r.Record = utc(r.CreatedAt), []byte(record)
	return &r, nil
}

const templateColumns = `name, tag, team_id, build_id, created_at, record`

// GetTemplate returns the record of name and tag.
func (db *DB) GetTemplate(ctx context.Context, name, tag string) (*store.TemplateRecord, error) {
	r, err := scanTemplate(db.pool.QueryRow(ctx, `SELECT `+templateColumns+` FROM templates WHERE name = $1 AND tag = $2`, name, tag))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("template %s: %w", templateRef(name, tag), store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("template %s: %w", templateRef(name, tag), err)
	}
	return r, nil
}

func (db *DB) listTemplates(ctx context.Context, q string, args ...any) ([]*store.TemplateRecord, error) {
	rows, err := db.pool.Query(ctx, `SELECT `+templateColumns+` FROM templates `+q, args...)
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
	return db.listTemplates(ctx, `WHERE name = $1 AND tag <> '' ORDER BY tag`, name)
}

// DeleteTemplate deletes name's record and its tags'.
func (db *DB) DeleteTemplate(ctx context.Context, name string) error {
	return db.deleteOne(ctx, "delete template "+name, `DELETE FROM templates WHERE name = $1`, name)
}

// DeleteTemplateTag deletes one tag of name.
func (db *DB) DeleteTemplateTag(ctx context.Context, name, tag string) error {
	if tag == "" {
		return fmt.Errorf("%w: delete tag of %s: no tag", store.ErrInvalid, name)
	}
	return db.deleteOne(ctx, "delete template "+templateRef(name, tag), `DELETE FROM templates WHERE name = $1 AND tag = $2`, name, tag)
}

// deleteOne runs a delete, ErrNotFound when it deleted nothing.
func (db *DB) deleteOne(ctx context.Context, what, q string, args ...any) error {
	tag, err := db.pool.Exec(ctx, q, args...)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%s: %w", what, store.ErrNotFound)
	}
	return nil
}

// PutTemplateLayer stores l.
func (db *DB) PutTemplateLayer(ctx context.Context, l *store.TemplateLayer) error {
	if l.Key == "" {
		return fmt.Errorf("%w: a layer without a key", store.ErrInvalid)
	}
	_, err := db.pool.Exec(ctx, `INSERT INTO template_layers (key, created_at, record) VALUES ($1, $2, $3)`, l.Key, l.CreatedAt.UTC(), string(l.Record))
	if isCode(err, uniqueViolation) {
		return fmt.Errorf("put layer %s: %w", l.Key, store.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("put layer %s: %w", l.Key, err)
	}
	return nil
}

func scanLayer(row pgx.Row) (*store.TemplateLayer, error) {
	var l store.TemplateLayer
	var record string
	if err := row.Scan(&l.Key, &l.CreatedAt, &record); err != nil {
		return nil, err
	}
	l.CreatedAt, l.Record = utc(l.CreatedAt), []byte(record)
	return &l, nil
}

// GetTemplateLayer returns the layer key.
func (db *DB) GetTemplateLayer(ctx context.Context, key string) (*store.TemplateLayer, error) {
	l, err := scanLayer(db.pool.QueryRow(ctx, `SELECT key, created_at, record FROM template_layers WHERE key = $1`, key))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("layer %s: %w", key, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("layer %s: %w", key, err)
	}
	return l, nil
}

// ListTemplateLayers returns every layer, by key.
func (db *DB) ListTemplateLayers(ctx context.Context) ([]*store.TemplateLayer, error) {
	rows, err := db.pool.Query(ctx, `SELECT key, created_at, record FROM template_layers ORDER BY key`)
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
	return db.deleteOne(ctx, "delete layer "+key, `DELETE FROM template_layers WHERE key = $1`, key)
}
