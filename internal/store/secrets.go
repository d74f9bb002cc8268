package store

import (
	"context"
	"time"
)

// Secret is a team secret's record (E2B's /secrets API). Its values are kept apart, one per
// version and sealed by the caller (internal/control/vault): the store never holds one in the clear.
type Secret struct {
	ID             string
	TeamID         string
	Name           string // lower-cased; unique per team
	CurrentVersion int64
	Metadata       map[string]string
	CreatedAt      time.Time
	UpdatedAt      time.Time
}

// Secrets stores team secrets and their sealed values.
type Secrets interface {
	// InsertSecret stores a new secret with its first version's sealed value; ErrConflict
	// when the team has one of that name or a secret has that id.
	InsertSecret(ctx context.Context, s *Secret, sealed []byte) error
	// AddSecretVersion stores sealed as the secret's version s.CurrentVersion and replaces
	// the record's metadata and update time with s's, in one transaction; ErrNotFound when
	// the team has no secret of that id.
	AddSecretVersion(ctx context.Context, s *Secret, sealed []byte) error
	// GetSecret returns the team's secret by id or name; ErrNotFound when there is none.
	GetSecret(ctx context.Context, teamID, ref string) (*Secret, error)
	// ListSecrets returns up to limit (all when 0) of the team's secrets with names after
	// after, by name.
	ListSecrets(ctx context.Context, teamID, after string, limit int) ([]*Secret, error)
	// DeleteSecret removes the secret and all its versions; ErrNotFound when there is none.
	DeleteSecret(ctx context.Context, teamID, id string) error
	// SecretValue returns the id of the team's secret name and its current version's number
	// and sealed value; ErrNotFound when there is none.
	SecretValue(ctx context.Context, teamID, name string) (id string, version int64, sealed []byte, err error)
}
