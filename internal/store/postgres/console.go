package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cove-dev/cove/internal/store"
)

// InsertConsoleSession stores a new console session.
func (db *DB) InsertConsoleSession(ctx context.Context, s *store.ConsoleSession) error {
	if s.TokenHash == "" || s.KeyID == "" || s.CSRF == "" {
		return errors.New("insert console session: token hash, key and csrf are required")
	}
	if _, err := db.pool.Exec(ctx, `INSERT INTO console_sessions
		(token_hash, team_id, team_name, key_id, csrf, admin_hash, created_at, expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
		s.TokenHash, s.TeamID, s.TeamName, s.KeyID, s.CSRF, s.AdminHash, s.CreatedAt, s.Expires); err != nil {
		return fmt.Errorf("insert console session: %w", err)
	}
	return nil
}

// GetConsoleSession returns the live session of tokenHash: not expired at now, and a team
// session's key neither revoked nor gone.
func (db *DB) GetConsoleSession(ctx context.Context, tokenHash string, now time.Time) (*store.ConsoleSession, error) {
	var s store.ConsoleSession
	err := db.pool.QueryRow(ctx, `SELECT s.token_hash, s.team_id, s.team_name, s.key_id, s.csrf, s.admin_hash, s.created_at, s.expires_at
		FROM console_sessions s LEFT JOIN api_keys k ON k.id = s.key_id AND k.team_id = s.team_id
		WHERE s.token_hash = $1 AND s.expires_at > $2 AND (s.team_id = '' OR (k.id IS NOT NULL AND k.revoked_at IS NULL))`,
		tokenHash, now).Scan(&s.TokenHash, &s.TeamID, &s.TeamName, &s.KeyID, &s.CSRF, &s.AdminHash, &s.CreatedAt, &s.Expires)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("console session: %w", store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("console session: %w", err)
	}
	s.CreatedAt, s.Expires = utc(s.CreatedAt), utc(s.Expires)
	return &s, nil
}

// DeleteConsoleSession ends the session of tokenHash.
func (db *DB) DeleteConsoleSession(ctx context.Context, tokenHash string) error {
	if _, err := db.pool.Exec(ctx, `DELETE FROM console_sessions WHERE token_hash = $1`, tokenHash); err != nil {
		return fmt.Errorf("delete console session: %w", err)
	}
	return nil
}

// DeleteConsoleSessionsOfKey ends every session signed in with keyID.
func (db *DB) DeleteConsoleSessionsOfKey(ctx context.Context, keyID string) error {
	if _, err := db.pool.Exec(ctx, `DELETE FROM console_sessions WHERE key_id = $1`, keyID); err != nil {
		return fmt.Errorf("delete console sessions of key %s: %w", keyID, err)
	}
	return nil
}

// PruneConsoleSessions deletes sessions that expired before before.
func (db *DB) PruneConsoleSessions(ctx context.Context, before time.Time) error {
	if _, err := db.pool.Exec(ctx, `DELETE FROM console_sessions WHERE expires_at < $1`, before); err != nil {
		return fmt.Errorf("prune console sessions: %w", err)
	}
	return nil
}
