package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/cove-dev/cove/internal/store"
)

var _ store.ConsoleSessions = (*DB)(nil)

// InsertConsoleSession stores a new console session.
func (db *DB) InsertConsoleSession(ctx context.Context, s *store.ConsoleSession) error {
	if s.TokenHash == "" || s.KeyID == "" || s.CSRF == "" {
		return errors.New("insert console session: token hash, key and csrf are required")
	}
	_, err := db.write.ExecContext(ctx, `INSERT INTO console_sessions
		(token_hash, team_id, team_name, key_id, csrf, admin_hash, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
		s.TokenHash, s.TeamID, s.TeamName, s.KeyID, s.CSRF, s.AdminHash, toMicros(s.CreatedAt), toMicros(s.Expires))
	if err != nil {
		return fmt.Errorf("insert console session: %w", err)
	}
	return nil
}

// GetConsoleSession returns the live session of tokenHash: not expired at now, and a team
// session's key neither revoked nor gone.
func (db *DB) GetConsoleSession(ctx context.Context, tokenHash string, now time.Time) (*store.ConsoleSession, error) {
	var s store.ConsoleSession
	var created, expires int64
	err := db.read.QueryRowContext(ctx, `SELECT s.token_hash, s.team_id, s.team_name, s.key_id, s.csrf, s.admin_hash, s.created_at, s.expires_at
		FROM console_sessions s LEFT JOIN api_keys k ON k.id = s.key_id AND k.team_id = s.team_id
		WHERE s.token_hash = ? AND s.expires_at > ? AND (s.team_id = '' OR (k.id IS NOT NULL AND k.revoked_at IS NULL))`,
		tokenHash, toMicros(now)).Scan(&s.TokenHash, &s.TeamID, &s.TeamName, &s.KeyID, &s.CSRF, &s.AdminHash, &created, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("console session: %w", store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("console session: %w", err)
	}
	s.CreatedAt, s.Expires = fromMicros(created), fromMicros(expires)
	return &s, nil
}

// DeleteConsoleSession ends the session of tokenHash.
func (db *DB) DeleteConsoleSession(ctx context.Context, tokenHash string) error {
	if _, err := db.write.ExecContext(ctx, `DELETE FROM console_sessions WHERE token_hash = ?`, tokenHash); err != nil {
		return fmt.Errorf("delete console session: %w", err)
	}
	return nil
}

// DeleteConsoleSessionsOfKey ends every session signed in with keyID.
func (db *DB) DeleteConsoleSessionsOfKey(ctx context.Context, keyID string) error {
	if _, err := db.write.ExecContext(ctx, `DELETE FROM console_sessions WHERE key_id = ?`, keyID); err != nil {
		return fmt.Errorf("delete console sessions of key %s: %w", keyID, err)
	}
	return nil
}

// PruneConsoleSessions deletes sessions that expired before before.
func (db *DB) PruneConsoleSessions(ctx context.Context, before time.Time) error {
	if _, err := db.write.ExecContext(ctx, `DELETE FROM console_sessions WHERE expires_at < ?`, toMicros(before)); err != nil {
		return fmt.Errorf("prune console sessions: %w", err)
	}
	return nil
}
