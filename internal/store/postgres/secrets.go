package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/cove-dev/cove/internal/store"
)

func orEmpty(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// InsertSecret stores a new secret with its first version's sealed value.
func (db *DB) InsertSecret(ctx context.Context, s *store.Secret, sealed []byte) error {
	md, err := json.Marshal(orEmpty(s.Metadata))
	if err != nil {
		return fmt.Errorf("insert secret %s: %w", s.Name, err)
	}
	err = pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO team_secrets (id, team_id, name, current_version, metadata, created_at, updated_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7)`, s.ID, s.TeamID, s.Name, s.CurrentVersion, md, s.CreatedAt, s.UpdatedAt); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO team_secret_versions (secret_id, version, sealed) VALUES ($1, $2, $3)`, s.ID, s.CurrentVersion, sealed)
		return err
	})
	if isCode(err, uniqueViolation) {
		return fmt.Errorf("insert secret %s: %w", s.Name, store.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("insert secret %s: %w", s.Name, err)
	}
	return nil
}

// AddSecretVersion stores sealed as the secret's version s.CurrentVersion.
func (db *DB) AddSecretVersion(ctx context.Context, s *store.Secret, sealed []byte) error {
	md, err := json.Marshal(orEmpty(s.Metadata))
	if err != nil {
		return fmt.Errorf("update secret %s: %w", s.ID, err)
	}
	err = pgx.BeginFunc(ctx, db.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE team_secrets SET current_version = $1, metadata = $2, updated_at = $3
			WHERE id = $4 AND team_id = $5`, s.CurrentVersion, md, s.UpdatedAt, s.ID, s.TeamID)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return store.ErrNotFound
		}
		_, err = tx.Exec(ctx, `INSERT INTO team_secret_versions (secret_id, version, sealed) VALUES ($1, $2, $3)`, s.ID, s.CurrentVersion, sealed)
		return err
	})
	if isCode(err, uniqueViolation) {
		return fmt.Errorf("update secret %s: version %d exists: %w", s.ID, s.CurrentVersion, store.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("update secret %s: %w", s.ID, err)
	}
	return nil
}

const secretColumns = `id, team_id, name, current_version, metadata, created_at, updated_at`

func scanSecret(row pgx.Row) (*store.Secret, error) {
	s := &store.Secret{}
	var md []byte
	if err := row.Scan(&s.ID, &s.TeamID, &s.Name, &s.CurrentVersion, &md, &s.CreatedAt, &s.UpdatedAt); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(md, &s.Metadata); err != nil {
		return nil, fmt.Errorf("secret %s: metadata: %w", s.ID, err)
	}
	s.CreatedAt, s.UpdatedAt = utc(s.CreatedAt), utc(s.UpdatedAt)
	return s, nil
}

// GetSecret returns the team's secret by id or name.
func (db *DB) GetSecret(ctx context.Context, teamID, ref string) (*store.Secret, error) {
	s, err := scanSecret(db.pool.QueryRow(ctx, `SELECT `+secretColumns+` FROM team_secrets
		WHERE team_id = $1 AND (id = $2 OR name = $2)`, teamID, ref))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("secret %q: %w", ref, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("secret %q: %w", ref, err)
	}
	return s, nil
}

// ListSecrets returns up to limit of the team's secrets named after after, by name.
func (db *DB) ListSecrets(ctx context.Context, teamID, after string, limit int) ([]*store.Secret, error) {
	var lim any // NULL: no limit
	if limit > 0 {
		lim = limit
	}
	rows, err := db.pool.Query(ctx, `SELECT `+secretColumns+` FROM team_secrets
		WHERE team_id = $1 AND name > $2 ORDER BY name LIMIT $3`, teamID, after, lim)
	if err != nil {
		return nil, fmt.Errorf("list secrets: %w", err)
	}
	defer rows.Close()
	var out []*store.Secret
	for rows.Next() {
		s, err := scanSecret(rows)
		if err != nil {
			return nil, fmt.Errorf("list secrets: %w", err)
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// DeleteSecret removes the secret and, by cascade, its versions.
func (db *DB) DeleteSecret(ctx context.Context, teamID, id string) error {
	tag, err := db.pool.Exec(ctx, `DELETE FROM team_secrets WHERE team_id = $1 AND id = $2`, teamID, id)
	if err != nil {
		return fmt.Errorf("delete secret %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("delete secret %s: %w", id, store.ErrNotFound)
	}
	return nil
}

// SecretValue returns the sealed value of the current version of the team's secret name.
func (db *DB) SecretValue(ctx context.Context, teamID, name string) (string, int64, []byte, error) {
	var id string
	var version int64
	var sealed []byte
	err := db.pool.QueryRow(ctx, `SELECT s.id, v.version, v.sealed FROM team_secrets s
		JOIN team_secret_versions v ON v.secret_id = s.id AND v.version = s.current_version
		WHERE s.team_id = $1 AND s.name = $2`, teamID, name).Scan(&id, &version, &sealed)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", 0, nil, fmt.Errorf("secret %q: %w", name, store.ErrNotFound)
	}
	if err != nil {
		return "", 0, nil, fmt.Errorf("secret %q: %w", name, err)
	}
	return id, version, sealed, nil
}
