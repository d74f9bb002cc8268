package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cove-dev/cove/internal/store"
)

var _ store.Identity = (*DB)(nil)

// InsertSigningKey stores k and retires the key that signed before it, in one transaction.
func (db *DB) InsertSigningKey(ctx context.Context, k *store.SigningKey) error {
	if k.ID == "" || k.Algorithm == "" || len(k.Sealed) == 0 {
		return errors.New("insert signing key: id, algorithm and sealed key are required")
	}
	err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE identity_keys SET retired_at = $1 WHERE retired_at IS NULL`, k.CreatedAt); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO identity_keys (id, algorithm, sealed, created_at) VALUES ($1, $2, $3, $4)`,
			k.ID, k.Algorithm, k.Sealed, k.CreatedAt)
		if isCode(err, uniqueViolation) {
			return fmt.Errorf("key %s: %w", k.ID, store.ErrConflict)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("insert signing key: %w", err)
	}
	return nil
}

// SigningKeys lists the keys, newest first.
func (db *DB) SigningKeys(ctx context.Context) ([]*store.SigningKey, error) {
	rows, err := db.pool.Query(ctx, `SELECT id, algorithm, sealed, created_at, retired_at FROM identity_keys ORDER BY created_at DESC, id DESC`)
	if err != nil {
		return nil, fmt.Errorf("signing keys: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*store.SigningKey, error) {
		k := &store.SigningKey{}
		err := row.Scan(&k.ID, &k.Algorithm, &k.Sealed, &k.CreatedAt, &k.RetiredAt)
		k.CreatedAt, k.RetiredAt = utc(k.CreatedAt), utcPtr(k.RetiredAt)
		return k, err
	})
	if err != nil {
		return nil, fmt.Errorf("signing keys: %w", err)
	}
	return out, nil
}

// DeleteSigningKeys deletes the keys retired before before.
func (db *DB) DeleteSigningKeys(ctx context.Context, before time.Time) error {
	if _, err := db.pool.Exec(ctx, `DELETE FROM identity_keys WHERE retired_at IS NOT NULL AND retired_at < $1`, before); err != nil {
		return fmt.Errorf("delete signing keys: %w", err)
	}
	return nil
}

// PutIdentityTokens replaces sandboxID's registered tokens with tokens, in one transaction.
func (db *DB) PutIdentityTokens(ctx context.Context, sandboxID string, tokens []store.IdentityToken) error {
	err := pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM identity_tokens WHERE sandbox_id = $1`, sandboxID); err != nil {
			return err
		}
		for _, t := range tokens {
			if _, err := tx.Exec(ctx, `INSERT INTO identity_tokens (sandbox_id, name, audience, token_type) VALUES ($1, $2, $3, $4)`,
				sandboxID, t.Name, t.Audience, t.TokenType); err != nil {
				return fmt.Errorf("token %q: %w", t.Name, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("put identity tokens of %s: %w", sandboxID, err)
	}
	return nil
}

// IdentityTokens lists sandboxID's registered tokens by name.
func (db *DB) IdentityTokens(ctx context.Context, sandboxID string) ([]store.IdentityToken, error) {
	rows, err := db.pool.Query(ctx, `SELECT name, audience, token_type FROM identity_tokens WHERE sandbox_id = $1 ORDER BY name`, sandboxID)
	if err != nil {
		return nil, fmt.Errorf("identity tokens of %s: %w", sandboxID, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.IdentityToken, error) {
		t := store.IdentityToken{SandboxID: sandboxID}
		return t, row.Scan(&t.Name, &t.Audience, &t.TokenType)
	})
	if err != nil {
		return nil, fmt.Errorf("identity tokens of %s: %w", sandboxID, err)
	}
	return out, nil
}

// GetIdentityToken returns sandboxID's registered token name.
func (db *DB) GetIdentityToken(ctx context.Context, sandboxID, name string) (*store.IdentityToken, error) {
	t := store.IdentityToken{SandboxID: sandboxID, Name: name}
	err := db.pool.QueryRow(ctx, `SELECT audience, token_type FROM identity_tokens WHERE sandbox_id = $1 AND name = $2`,
		sandboxID, name).Scan(&t.Audience, &t.TokenType)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("identity token %q of %s: %w", name, sandboxID, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("identity token %q of %s: %w", name, sandboxID, err)
	}
	return &t, nil
}

// DeleteIdentityTokens forgets sandboxID's registered tokens.
func (db *DB) DeleteIdentityTokens(ctx context.Context, sandboxID string) error {
	if _, err := db.pool.Exec(ctx, `DELETE FROM identity_tokens WHERE sandbox_id = $1`, sandboxID); err != nil {
		return fmt.Errorf("delete identity tokens of %s: %w", sandboxID, err)
	}
	return nil
}

// DeleteKilledIdentityTokens forgets the tokens of the sandboxes whose record says killed.
func (db *DB) DeleteKilledIdentityTokens(ctx context.Context) ([]string, error) {
	rows, err := db.pool.Query(ctx, `WITH gone AS (DELETE FROM identity_tokens
		WHERE sandbox_id IN (SELECT id FROM sandboxes WHERE state = 'killed') RETURNING sandbox_id)
		SELECT DISTINCT sandbox_id FROM gone ORDER BY 1`)
	if err != nil {
		return nil, fmt.Errorf("delete identity tokens of killed sandboxes: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("delete identity tokens of killed sandboxes: %w", err)
	}
	return ids, nil
}
