package sqlite

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	sqlite3 "modernc.org/sqlite/lib"

	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/store"
)

// lastUsedEvery is how stale last_used may get: Authenticate writes it at most this often
// per key, so authentication stays a read.
const lastUsedEvery = time.Minute

// randomHex returns n random bytes in lowercase hex.
func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b) // never fails (crypto/rand, Go 1.24+)
	return hex.EncodeToString(b)
}

func hashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// maskKey shows enough of a key to tell keys apart in a listing: "e2b_1a2b…9f0e".
func maskKey(key string) string {
	const prefix = "e2b_"
	return key[:len(prefix)+4] + "…" + key[len(key)-4:]
}

// CreateTeam creates a team named name.
func (db *DB) CreateTeam(ctx context.Context, name string) (*store.Team, error) {
	t := &store.Team{ID: "team_" + randomHex(8), Name: name, CreatedAt: now()}
	if _, err := db.write.ExecContext(ctx,
		`INSERT INTO teams (id, name, created_at) VALUES (?, ?, ?)`,
		t.ID, t.Name, toMicros(t.CreatedAt)); err != nil {
		return nil, fmt.Errorf("create team %q: %w", name, err)
	}
	return t, nil
}

// GetTeam returns the team id, or store.ErrNotFound.
func (db *DB) GetTeam(ctx context.Context, id string) (*store.Team, error) {
	t := &store.Team{}
	var created int64
	err := db.read.QueryRowContext(ctx,
		`SELECT id, name, created_at FROM teams WHERE id = ?`, id).Scan(&t.ID, &t.Name, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("team %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get team %s: %w", id, err)
	}
	t.CreatedAt = fromMicros(created)
	return t, nil
}

// ListTeams returns every team, oldest first.
func (db *DB) ListTeams(ctx context.Context) ([]*store.Team, error) {
	rows, err := db.read.QueryContext(ctx, `SELECT id, name, created_at FROM teams ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("list teams: %w", err)
	}
	defer rows.Close()
	var ts []*store.Team
	for rows.Next() {
		t := &store.Team{}
		var created int64
		if err := rows.Scan(&t.ID, &t.Name, &created); err != nil {
			return nil, fmt.Errorf("list teams: %w", err)
		}
		t.CreatedAt = fromMicros(created)
		ts = append(ts, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list teams: %w", err)
	}
	return ts, nil
}

// CreateAPIKey makes a new key for team teamID and returns it in clear; only its SHA-256 is
// stored. store.ErrNotFound when the team does not exist.
func (db *DB) CreateAPIKey(ctx context.Context, teamID, name string) (string, *store.APIKey, error) {
	key := "e2b_" + randomHex(20)
	k := &store.APIKey{
		ID:        "key_" + randomHex(8),
		TeamID:    teamID,
		Name:      name,
		Mask:      maskKey(key),
		CreatedAt: now(),
	}
	_, err := db.write.ExecContext(ctx,
		`INSERT INTO api_keys (id, team_id, name, key_hash, mask, created_at) VALUES (?, ?, ?, ?, ?, ?)`,
		k.ID, k.TeamID, k.Name, hashKey(key), k.Mask, toMicros(k.CreatedAt))
	if isCode(err, sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY) {
		return "", nil, fmt.Errorf("create api key: team %s: %w", teamID, store.ErrNotFound)
	}
	if err != nil {
		return "", nil, fmt.Errorf("create api key for team %s: %w", teamID, err)
	}
	return key, k, nil
}

// Authenticate returns the live key and its team for key, and records its use at most once
// a minute. store.ErrNotFound for an unknown or revoked key.
func (db *DB) Authenticate(ctx context.Context, key string) (*store.APIKey, *store.Team, error) {
	k := &store.APIKey{}
	t := &store.Team{}
	var keyCreated, teamCreated int64
	var lastUsed, revoked sql.NullInt64
	err := db.read.QueryRowContext(ctx, `
		SELECT k.id, k.team_id, k.name, k.mask, k.created_at, k.last_used, k.revoked_at,
		       t.id, t.name, t.created_at
		FROM api_keys k JOIN teams t ON t.id = k.team_id
		WHERE k.key_hash = ?`, hashKey(key)).Scan(
		&k.ID, &k.TeamID, &k.Name, &k.Mask, &keyCreated, &lastUsed, &revoked,
		&t.ID, &t.Name, &teamCreated)
	if errors.Is(err, sql.ErrNoRows) || err == nil && revoked.Valid {
		// One answer for unknown and revoked keys: the caller learns nothing about which.
		return nil, nil, fmt.Errorf("api key: %w", store.ErrNotFound)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("authenticate: %w", err)
	}
	k.CreatedAt, t.CreatedAt = fromMicros(keyCreated), fromMicros(teamCreated)
	k.LastUsed = fromNullMicros(lastUsed)

	at := now()
	if k.LastUsed == nil || at.Sub(*k.LastUsed) >= lastUsedEvery {
		// The condition is repeated in SQL so that concurrent callers, in this process or
		// another, write it once between them. A failure costs only a stale last_used, so it
		// does not fail the request.
		if _, err := db.write.ExecContext(ctx,
			`UPDATE api_keys SET last_used = ? WHERE id = ? AND (last_used IS NULL OR last_used <= ?)`,
			toMicros(at), k.ID, toMicros(at.Add(-lastUsedEvery))); err != nil {
			telemetry.Warnings.Warn(ctx, telemetry.Logger(ctx), "", "api key use not recorded",
				telemetry.KeyTeamID, t.ID, telemetry.KeyAPIKeyID, k.ID, telemetry.KeyError, err)
		} else {
			k.LastUsed = &at
		}
	}
	return k, t, nil
}

// ListAPIKeys returns team teamID's keys, revoked ones included, oldest first.
// store.ErrNotFound when the team does not exist.
func (db *DB) ListAPIKeys(ctx context.Context, teamID string) ([]*store.APIKey, error) {
	tx, err := db.read.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("list api keys: %w", err)
	}
	defer tx.Rollback()
	var one int
	err = tx.QueryRowContext(ctx, `SELECT 1 FROM teams WHERE id = ?`, teamID).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("list api keys: team %s: %w", teamID, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("list api keys: %w", err)
	}
	rows, err := tx.QueryContext(ctx, `
		SELECT id, team_id, name, mask, created_at, last_used, revoked_at
		FROM api_keys WHERE team_id = ? ORDER BY created_at, id`, teamID)
	if err != nil {
		return nil, fmt.Errorf("list api keys: %w", err)
	}
	defer rows.Close()
	var ks []*store.APIKey
	for rows.Next() {
		k := &store.APIKey{}
		var created int64
		var lastUsed, revoked sql.NullInt64
		if err := rows.Scan(&k.ID, &k.TeamID, &k.Name, &k.Mask, &created, &lastUsed, &revoked); err != nil {
			return nil, fmt.Errorf("list api keys: %w", err)
		}
		k.CreatedAt, k.LastUsed, k.RevokedAt = fromMicros(created), fromNullMicros(lastUsed), fromNullMicros(revoked)
		ks = append(ks, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list api keys: %w", err)
	}
	return ks, nil
}

// RevokeAPIKey revokes team teamID's key id. Revoking a revoked key does nothing;
// store.ErrNotFound when the team has no such key.
func (db *DB) RevokeAPIKey(ctx context.Context, teamID, id string) error {
	return db.writeTx(ctx, func(tx *sql.Tx) error {
		var revoked sql.NullInt64
		err := tx.QueryRowContext(ctx,
			`SELECT revoked_at FROM api_keys WHERE id = ? AND team_id = ?`, id, teamID).Scan(&revoked)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("revoke api key %s of team %s: %w", id, teamID, store.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("revoke api key %s: %w", id, err)
		}
		if revoked.Valid {
			return nil
		}
		if _, err := tx.ExecContext(ctx,
			`UPDATE api_keys SET revoked_at = ? WHERE id = ?`, toMicros(now()), id); err != nil {
			return fmt.Errorf("revoke api key %s: %w", id, err)
		}
		return nil
	})
}
