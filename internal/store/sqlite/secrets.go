package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	sqlite3 "modernc.org/sqlite/lib"

	"github.com/cove-dev/cove/internal/store"
)

var _ store.Secrets = (*DB)(nil)

// InsertSecret stores a new secret with its first version's sealed value.
func (db *DB) InsertSecret(ctx context.Context, s *store.Secret, sealed []byte) error {
	md, err := json.Marshal(orEmpty(s.Metadata))
	if err != nil {
		return fmt.Errorf("insert secret %s: %w", s.Name, err)
	}
	err = db.writeTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO team_secrets (id, team_id, name, current_version, metadata, created_at, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, ?)`, s.ID, s.TeamID, s.Name, s.CurrentVersion, string(md), toMicros(s.CreatedAt), toMicros(s.UpdatedAt)); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO team_secret_versions (secret_id, version, sealed) VALUES (?, ?, ?)`,
			s.ID, s.CurrentVersion, sealed)
		return err
	})
	if isCode(err, sqlite3.SQLITE_CONSTRAINT_UNIQUE) || isCode(err, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY) {
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
	err = db.writeTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE team_secrets SET current_version = ?, metadata = ?, updated_at = ?
			WHERE id = ? AND team_id = ?`, s.CurrentVersion, string(md), toMicros(s.UpdatedAt), s.ID, s.TeamID)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return store.ErrNotFound
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO team_secret_versions (secret_id, version, sealed) VALUES (?, ?, ?)`,
			s.ID, s.CurrentVersion, sealed)
		return err
	})
	if isCode(err, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY) {
		return fmt.Errorf("update secret %s: version %d exists: %w", s.ID, s.CurrentVersion, store.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("update secret %s: %w", s.ID, err)
	}
	return nil
}

const secretColumns = `id, team_id, name, current_version, metadata, created_at, updated_at`

func scanSecret(row interface{ Scan(...any) error }) (*store.Secret, error) {
	s := &store.Secret{}
	var md string
	var created, updated int64
	if err := row.Scan(&s.ID, &s.TeamID, &s.Name, &s.CurrentVersion, &md, &created, &updated); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(md), &s.Metadata); err != nil {
		return nil, fmt.Errorf("secret %s: metadata: %w", s.ID, err)
	}
	s.CreatedAt, s.UpdatedAt = fromMicros(created), fromMicros(updated)
	return s, nil
}

// GetSecret returns the team's secret by id or name.
func (db *DB) GetSecret(ctx context.Context, teamID, ref string) (*store.Secret, error) {
	s, err := scanSecret(db.read.QueryRowContext(ctx, `SELECT `+secretColumns+` FROM team_secrets
		WHERE team_id = ? AND (id = ? OR name = ?)`, teamID, ref, ref))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("secret %q: %w", ref, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("secret %q: %w", ref, err)
	}
	return s, nil
}

// ListSecrets returns up to limit of the team's secrets named after after, by name.
func (db *DB) ListSecrets(ctx context.Context, teamID, after string, limit int) ([]*store.Secret, error) {
	if limit <= 0 {
		limit = -1 // SQLite: no limit
	}
	rows, err := db.read.QueryContext(ctx, `SELECT `+secretColumns+` FROM team_secrets
		WHERE team_id = ? AND name > ? ORDER BY name LIMIT ?`, teamID, after, limit)
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
	res, err := db.write.ExecContext(ctx, `DELETE FROM team_secrets WHERE team_id = ? AND id = ?`, teamID, id)
	if err != nil {
		return fmt.Errorf("delete secret %s: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("delete secret %s: %w", id, store.ErrNotFound)
	}
	return nil
}

// SecretValue returns the sealed value of the current version of the team's secret name.
func (db *DB) SecretValue(ctx context.Context, teamID, name string) (string, int64, []byte, error) {
	var id string
	var version int64
	var sealed []byte
	err := db.read.QueryRowContext(ctx, `SELECT s.id, v.version, v.sealed FROM team_secrets s
		JOIN team_secret_versions v ON v.secret_id = s.id AND v.version = s.current_version
		WHERE s.team_id = ? AND s.name = ?`, teamID, name).Scan(&id, &version, &sealed)
	if errors.Is(err, sql.ErrNoRows) {
		return "", 0, nil, fmt.Errorf("secret %q: %w", name, store.ErrNotFound)
	}
	if err != nil {
		return "", 0, nil, fmt.Errorf("secret %q: %w", name, err)
	}
	return id, version, sealed, nil
}

func orEmpty(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}
