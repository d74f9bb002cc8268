package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/cove-dev/cove/internal/store"
)

// SetPoolSize records template's pool size.
func (db *DB) SetPoolSize(ctx context.Context, template string, size int) error {
	if template == "" || size < 0 {
		return fmt.Errorf("%w: pool size %d of template %q", store.ErrInvalid, size, template)
	}
	_, err := db.pool.Exec(ctx, `INSERT INTO pool_sizes (template, size, updated_at) VALUES ($1, $2, $3)
		ON CONFLICT (template) DO UPDATE SET size = excluded.size, updated_at = excluded.updated_at`, template, size, time.Now().UTC())
	if err != nil {
		return fmt.Errorf("pool size of %s: %w", template, err)
	}
	return nil
}

// PoolSizes returns every recorded pool size.
func (db *DB) PoolSizes(ctx context.Context) (map[string]int, error) {
	rows, err := db.pool.Query(ctx, `SELECT template, size FROM pool_sizes`)
	if err != nil {
		return nil, fmt.Errorf("pool sizes: %w", err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var name string
		var size int
		if err := rows.Scan(&name, &size); err != nil {
			return nil, fmt.Errorf("pool sizes: %w", err)
		}
		out[name] = size
	}
	return out, rows.Err()
}
