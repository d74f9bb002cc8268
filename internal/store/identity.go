package store

import (
	"context"
	"time"
)

// SigningKey is one of the workload identity issuer's signing keys. Its private half is kept
// only sealed (vault.Seal): a copy of the database signs no token.
type SigningKey struct {
	ID        string // the JWT header's kid
	Algorithm string // "ES256"
	// Sealed is the private key (PKCS #8 DER), sealed under the vault's key with ID as its label.
	Sealed    []byte
	CreatedAt time.Time
	// RetiredAt is when a newer key took over the signing; nil while this key signs. A retired
	// key stays published until the last token it signed has expired.
	RetiredAt *time.Time
}

// IdentityToken is one named workload token a sandbox registered at create (E2B's iam.tokens):
// what to mint, never a token itself.
type IdentityToken struct {
	SandboxID string
	Name      string // the <name> of ${e2b.identity.tokens.<name>}
	Audience  string
	TokenType string // "JWT-SVID"
}

// Identity stores the workload identity issuer's keys and the sandboxes' token registrations.
type Identity interface {
	// InsertSigningKey stores a new key and retires, at its CreatedAt, every key still
	// signing: one key signs at a time.
	InsertSigningKey(ctx context.Context, k *SigningKey) error
	// SigningKeys lists the keys, newest first.
	SigningKeys(ctx context.Context) ([]*SigningKey, error)
	// DeleteSigningKeys deletes the keys retired before before.
	DeleteSigningKeys(ctx context.Context, before time.Time) error

	// PutIdentityTokens registers sandboxID's tokens, replacing any it had.
	PutIdentityTokens(ctx context.Context, sandboxID string, tokens []IdentityToken) error
	// IdentityTokens lists sandboxID's registered tokens by name; none is an empty list.
	IdentityTokens(ctx context.Context, sandboxID string) ([]IdentityToken, error)
	// GetIdentityToken returns sandboxID's token name; ErrNotFound when it registered none.
	GetIdentityToken(ctx context.Context, sandboxID, name string) (*IdentityToken, error)
	// DeleteIdentityTokens forgets sandboxID's tokens; none is not an error.
	DeleteIdentityTokens(ctx context.Context, sandboxID string) error
	// DeleteKilledIdentityTokens forgets the tokens of every killed sandbox and returns
	// the ids of the sandboxes it forgot.
	DeleteKilledIdentityTokens(ctx context.Context) ([]string, error)
}
