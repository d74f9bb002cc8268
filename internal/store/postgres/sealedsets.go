package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// PutSealedSet stores name's sealed set as node's.
func (db *DB) PutSealedSet(ctx context.Context, node, name string, sealed []byte) error {
	_, err := db.pool.Exec(ctx, `INSERT INTO sealed_sets (name, node, sealed, updated_at) VALUES ($1, $2, $3, $4)
		ON CONFLICT (name) DO UPDATE SET node = excluded.node, sealed = excluded.sealed, updated_at = excluded.updated_at`,
		name, node, sealed, time.Now().UTC())
	if err != nil {
		return fmt.Errorf("sealed set %s: %w", name, err)
	}
	return nil
}

// SealedSet returns name's sealed set; nil when there is none.
func (db *DB) SealedSet(ctx context.Context, name string) ([]byte, error) {
	var b []byte
	err := db.pool.QueryRow(ctx, `SELECT sealed FROM sealed_sets WHERE name = $1`, name).Scan(&b)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sealed set %s: %w", name, err)
	}
	return b, nil
}

// DeleteSealedSet removes name's set when node put it last.
func (db *DB) DeleteSealedSet(ctx context.Context, node, name string) error {
	if _, err := db.pool.Exec(ctx, `DELETE FROM sealed_sets WHERE name = $1 AND node = $2`, name, node); err != nil {
		return fmt.Errorf("sealed set %s: %w", name, err)
	}
	return nil
}

// SealedSetNames lists node's sets.
func (db *DB) SealedSetNames(ctx context.Context, node string) ([]string, error) {
	rows, err := db.pool.Query(ctx, `SELECT name FROM sealed_sets WHERE node = $1 ORDER BY name`, node)
	if err != nil {
		return nil, fmt.Errorf("sealed sets of node %q: %w", node, err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("sealed sets of node %q: %w", node, err)
	}
	return names, nil
}
