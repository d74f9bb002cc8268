package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	sqlite3 "modernc.org/sqlite/lib"

	"github.com/cove-dev/cove/internal/store"
)

var _ store.Identity = (*DB)(nil)

// InsertSigningKey stores k and retires the key that signed before it, in one transaction.
func (db *DB) InsertSigningKey(ctx context.Context, k *store.SigningKey) error {
	if k.ID == "" || k.Algorithm == "" || len(k.Sealed) == 0 {
		return errors.New("insert signing key: id, algorithm and sealed key are required")
	}
	err := db.writeTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `UPDATE identity_keys SET retired_at = ? WHERE retired_at IS NULL`, toMicros(k.CreatedAt)); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO identity_keys (id, algorithm, sealed, created_at, retired_at) VALUES (?, ?, ?, ?, NULL)`,
			k.ID, k.Algorithm, k.Sealed, toMicros(k.CreatedAt))
		if isCode(err, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY) {
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
	rows, err := db.read.QueryContext(ctx, `SELECT id, algorithm, sealed, created_at, retired_at FROM identity_keys ORDER BY created_at DESC, id DESC`)
	if err != nil {
		return nil, fmt.Errorf("signing keys: %w", err)
	}
	defer rows.Close()
	var out []*store.SigningKey
	for rows.Next() {
		var k store.SigningKey
		var created int64
		var retired sql.NullInt64
		if err := rows.Scan(&k.ID, &k.Algorithm, &k.Sealed, &created, &retired); err != nil {
			return nil, fmt.Errorf("signing keys: %w", err)
		}
		k.CreatedAt, k.RetiredAt = fromMicros(created), fromNullMicros(retired)
		out = append(out, &k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("signing keys: %w", err)
	}
	return out, nil
}

// DeleteSigningKeys deletes the keys retired before before.
func (db *DB) DeleteSigningKeys(ctx context.Context, before time.Time) error {
	if _, err := db.write.ExecContext(ctx, `DELETE FROM identity_keys WHERE retired_at IS NOT NULL AND retired_at < ?`, toMicros(before)); err != nil {
		return fmt.Errorf("delete signing keys: %w", err)
	}
	return nil
}

// PutIdentityTokens replaces sandboxID's registered tokens with tokens, in one transaction.
func (db *DB) PutIdentityTokens(ctx context.Context, sandboxID string, tokens []store.IdentityToken) error {
	err := db.writeTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `DELETE FROM identity_tokens WHERE sandbox_id = ?`, sandboxID); err != nil {
			return err
		}
		for _, t := range tokens {
			if _, err := tx.ExecContext(ctx, `INSERT INTO identity_tokens (sandbox_id, name, audience, token_type) VALUES (?, ?, ?, ?)`,
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
	rows, err := db.read.QueryContext(ctx, `SELECT name, audience, token_type FROM identity_tokens WHERE sandbox_id = ? ORDER BY name`, sandboxID)
	if err != nil {
		return nil, fmt.Errorf("identity tokens of %s: %w", sandboxID, err)
	}
	defer rows.Close()
	var out []store.IdentityToken
	for rows.Next() {
		t := store.IdentityToken{SandboxID: sandboxID}
		if err := rows.Scan(&t.Name, &t.Audience, &t.TokenType); err != nil {
			return nil, fmt.Errorf("identity tokens of %s: %w", sandboxID, err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("identity tokens of %s: %w", sandboxID, err)
	}
	return out, nil
}

// GetIdentityToken returns sandboxID's registered token name.
func (db *DB) GetIdentityToken(ctx context.Context, sandboxID, name string) (*store.IdentityToken, error) {
	t := store.IdentityToken{SandboxID: sandboxID, Name: name}
	err := db.read.QueryRowContext(ctx, `SELECT audience, token_type FROM identity_tokens WHERE sandbox_id = ? AND name = ?`,
		sandboxID, name).Scan(&t.Audience, &t.TokenType)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("identity token %q of %s: %w", name, sandboxID, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("identity token %q of %s: %w", name, sandboxID, err)
	}
	return &t, nil
}

// DeleteIdentityTokens forgets sandboxID's registered tokens.
func (db *DB) DeleteIdentityTokens(ctx context.Context, sandboxID string) error {
	if _, err := db.write.ExecContext(ctx, `DELETE FROM identity_tokens WHERE sandbox_id = ?`, sandboxID); err != nil {
		return fmt.Errorf("delete identity tokens of %s: %w", sandboxID, err)
	}
	return nil
}

// DeleteKilledIdentityTokens forgets the tokens of the sandboxes whose record says killed.
func (db *DB) DeleteKilledIdentityTokens(ctx context.Context) ([]string, error) {
	var ids []string
	err := db.writeTx(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `DELETE FROM identity_tokens
			WHERE sandbox_id IN (SELECT id FROM sandboxes WHERE state = ?) RETURNING sandbox_id`, string(store.StateKilled))
		if err != nil {
			return err
		}
		defer rows.Close()
		seen := map[string]bool{}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				return err
			}
			if !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("delete identity tokens of killed sandboxes: %w", err)
	}
	return ids, nil
}
