package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// PutSealedSet stores name's sealed set as node's.
func (db *DB) PutSealedSet(ctx context.Context, node, name string, sealed []byte) error {
	_, err := db.write.ExecContext(ctx, `INSERT INTO sealed_sets (name, node, sealed, updated_at) VALUES (?, ?, ?, ?)
		ON CONFLICT (name) DO UPDATE SET node = excluded.node, sealed = excluded.sealed, updated_at = excluded.updated_at`,
		name, node, sealed, time.Now().UnixNano())
	if err != nil {
		return fmt.Errorf("sealed set %s: %w", name, err)
	}
	return nil
}

// SealedSet returns name's sealed set; nil when there is none.
func (db *DB) SealedSet(ctx context.Context, name string) ([]byte, error) {
	var b []byte
	err := db.read.QueryRowContext(ctx, `SELECT sealed FROM sealed_sets WHERE name = ?`, name).Scan(&b)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sealed set %s: %w", name, err)
	}
	return b, nil
}

// DeleteSealedSet removes name's set when node put it last.
func (db *DB) DeleteSealedSet(ctx context.Context, node, name string) error {
	if _, err := db.write.ExecContext(ctx, `DELETE FROM sealed_sets WHERE name = ? AND node = ?`, name, node); err != nil {
		return fmt.Errorf("sealed set %s: %w", name, err)
	}
	return nil
}

// SealedSetNames lists node's sets.
func (db *DB) SealedSetNames(ctx context.Context, node string) ([]string, error) {
	rows, err := db.read.QueryContext(ctx, `SELECT name FROM sealed_sets WHERE node = ? ORDER BY name`, node)
	if err != nil {
		return nil, fmt.Errorf("sealed sets of node %q: %w", node, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, fmt.Errorf("sealed sets of node %q: %w", node, err)
		}
		out = append(out, name)
	}
	return out, rows.Err()
}
