package store

import (
	"context"
	"time"
)

// ConsoleSession is one signed-in viewer of the web console. The cookie holds a random
// token; only its SHA-256 is stored.
type ConsoleSession struct {
	TokenHash string // hex SHA-256 of the cookie's token
	TeamID    string // "" for the admin: every team
	TeamName  string
	KeyID     string // the API key signed in with, or "admin"; the actor of the viewer's actions
	CSRF      string // the token every form of the session carries
	// AdminHash is, for an admin session, the SHA-256 of the admin token it signed in with:
	// the console ends the session once the server's token is another.
	AdminHash string
	CreatedAt time.Time
	Expires   time.Time
}

// ConsoleSessions stores the console's sessions, so they survive a server restart.
type ConsoleSessions interface {
	InsertConsoleSession(ctx context.Context, s *ConsoleSession) error
	// GetConsoleSession returns the session of tokenHash while it is live at now: not
	// expired, and, for a team's session, its API key not revoked. ErrNotFound otherwise.
	GetConsoleSession(ctx context.Context, tokenHash string, now time.Time) (*ConsoleSession, error)
	// DeleteConsoleSession ends one session; ending an unknown one is not an error.
	DeleteConsoleSession(ctx context.Context, tokenHash string) error
	// DeleteConsoleSessionsOfKey ends every session signed in with API key keyID.
	DeleteConsoleSessionsOfKey(ctx context.Context, keyID string) error
	// PruneConsoleSessions deletes the sessions expired before before.
	PruneConsoleSessions(ctx context.Context, before time.Time) error
}
