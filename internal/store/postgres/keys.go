package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/store"
)

// lastUsedEvery is how stale last_used may get: Authenticate writes it at most this often.
const lastUsedEvery = time.Minute

// maskKey shows enough of a key to tell keys apart in a listing: "e2b_1a2b…9f0e".
func maskKey(key string) string {
	const prefix = "e2b_"
	return key[:len(prefix)+4] + "…" + key[len(key)-4:]
}

// CreateTeam creates a team named name.
func (db *DB) CreateTeam(ctx context.Context, name string) (*store.Team, error) {
	t := &store.Team{ID: "team_" + randomHex(8), Name: name, CreatedAt: now()}
	if _, err := db.pool.Exec(ctx, `INSERT INTO teams (id, name, created_at) VALUES ($1, $2, $3)`, t.ID, t.Name, t.CreatedAt); err != nil {
		return nil, fmt.Errorf("create team %q: %w", name, err)
	}
	return t, nil
}

// GetTeam returns the team id, or store.ErrNotFound.
func (db *DB) GetTeam(ctx context.Context, id string) (*store.Team, error) {
	t := &store.Team{}
	err := db.pool.QueryRow(ctx, `SELECT id, name, created_at FROM teams WHERE id = $1`, id).Scan(&t.ID, &t.Name, &t.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("team %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get team %s: %w", id, err)
	}
	t.CreatedAt = utc(t.CreatedAt)
	return t, nil
}

// ListTeams returns every team, oldest first.
func (db *DB) ListTeams(ctx context.Context) ([]*store.Team, error) {
	rows, err := db.pool.Query(ctx, `SELECT id, name, created_at FROM teams ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("list teams: %w", err)
	}
	ts, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*store.Team, error) {
		t := &store.Team{}
		err := row.Scan(&t.ID, &t.Name, &t.CreatedAt)
		t.CreatedAt = utc(t.CreatedAt)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("list teams: %w", err)
	}
	return ts, nil
}

// CreateAPIKey makes a new key for team teamID and returns it in clear; only its SHA-256 is
// stored. store.ErrNotFound when the team does not exist.
func (db *DB) CreateAPIKey(ctx context.Context, teamID, name string) (string, *store.APIKey, error) {
	key := "e2b_" + randomHex(20)
	k := &store.APIKey{ID: "key_" + randomHex(8), TeamID: teamID, Name: name, Mask: maskKey(key), CreatedAt: now()}
	_, err := db.pool.Exec(ctx, `INSERT INTO api_keys (id, team_id, name, key_hash, mask, created_at) VALUES ($1, $2, $3, $4, $5, $6)`,
		k.ID, k.TeamID, k.Name, hashKey(key), k.Mask, k.CreatedAt)
	if isCode(err, foreignKeyViolation) {
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
	var revoked *time.Time
	err := db.pool.QueryRow(ctx, `
		SELECT k.id, k.team_id, k.name, k.mask, k.created_at, k.last_used, k.revoked_at, t.id, t.name, t.created_at
		FROM api_keys k JOIN teams t ON t.id = k.team_id WHERE k.key_hash = $1`, hashKey(key)).Scan(
		&k.ID, &k.TeamID, &k.Name, &k.Mask, &k.CreatedAt, &k.LastUsed, &revoked, &t.ID, &t.Name, &t.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) || err == nil && revoked != nil {
		// One answer for unknown and revoked keys: the caller learns nothing about which.
		return nil, nil, fmt.Errorf("api key: %w", store.ErrNotFound)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("authenticate: %w", err)
	}
	k.CreatedAt, t.CreatedAt, k.LastUsed = utc(k.CreatedAt), utc(t.CreatedAt), utcPtr(k.LastUsed)
	at := now()
	if k.LastUsed == nil || at.Sub(*k.LastUsed) >= lastUsedEvery {
		// The condition is repeated in SQL so that concurrent callers, on any node, write it
		// once between them. A failure costs only a stale last_used.
		if _, err := db.pool.Exec(ctx, `UPDATE api_keys SET last_used = $1 WHERE id = $2 AND (last_used IS NULL OR last_used <= $3)`,
			at, k.ID, at.Add(-lastUsedEvery)); err != nil {
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
	var ks []*store.APIKey
	err := pgx.BeginTxFunc(ctx, db.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly, IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
		var one int
		if err := tx.QueryRow(ctx, `SELECT 1 FROM teams WHERE id = $1`, teamID).Scan(&one); errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("team %s: %w", teamID, store.ErrNotFound)
		} else if err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT id, team_id, name, mask, created_at, last_used, revoked_at
			FROM api_keys WHERE team_id = $1 ORDER BY created_at, id`, teamID)
		if err != nil {
			return err
		}
		ks, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (*store.APIKey, error) {
			k := &store.APIKey{}
			err := row.Scan(&k.ID, &k.TeamID, &k.Name, &k.Mask, &k.CreatedAt, &k.LastUsed, &k.RevokedAt)
			k.CreatedAt, k.LastUsed, k.RevokedAt = utc(k.CreatedAt), utcPtr(k.LastUsed), utcPtr(k.RevokedAt)
			return k, err
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list api keys: %w", err)
	}
	return ks, nil
}

// RevokeAPIKey revokes team teamID's key id. Revoking a revoked key does nothing;
// store.ErrNotFound when the team has no such key.
func (db *DB) RevokeAPIKey(ctx context.Context, teamID, id string) error {
	tag, err := db.pool.Exec(ctx, `UPDATE api_keys SET revoked_at = COALESCE(revoked_at, $1) WHERE id = $2 AND team_id = $3`, now(), id, teamID)
	if err != nil {
		return fmt.Errorf("revoke api key %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("revoke api key %s of team %s: %w", id, teamID, store.ErrNotFound)
	}
	return nil
}
