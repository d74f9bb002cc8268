// Package store defines Cove's persistent state behind interfaces: teams and API keys, and
// sandbox records. SQLite (store/sqlite) implements them by default; the shapes are chosen
// so PostgreSQL can take the same state without changing callers.
//
// It owns the persistent shapes and their interfaces; it must not import the orchestrator, the
// runtime, events, collect or the edges.
package store

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cove-dev/cove/internal/errdefs"
	"github.com/cove-dev/cove/sdk/reason"
)

// Errors callers branch on.
var (
	ErrNotFound = errdefs.New(errdefs.ErrNotFound, "not found")
	ErrConflict = errdefs.New(errdefs.ErrConflict, "conflict")
	// ErrInvalid is a request the store cannot serve as asked (a forged page token): the
	// caller's mistake, a 400.
	ErrInvalid = errdefs.New(errdefs.ErrInvalidArgument, "invalid request")
)

// Team owns sandboxes and API keys.
type Team struct {
	ID        string
	Name      string
	CreatedAt time.Time
}

// APIKey is a team's key. Only its SHA-256 is stored; the key itself is shown once.
type APIKey struct {
	ID        string
	TeamID    string
	Name      string
	Mask      string // e.g. "e2b_1a2b…9f0e", for listings
	CreatedAt time.Time
	LastUsed  *time.Time
	RevokedAt *time.Time
}

// SandboxState is a sandbox's lifecycle state as stored.
type SandboxState string

// Sandbox states.
const (
	StateRunning SandboxState = "running"
	StatePaused  SandboxState = "paused"
	StateKilled  SandboxState = "killed"
)

// Sandbox is one sandbox's record. Killed sandboxes stay, so a client asking about one learns
// why it is gone.
type Sandbox struct {
	ID          string
	TeamID      string
	TemplateID  string
	Alias       string
	State       SandboxState
	Metadata    map[string]string
	EnvVarNames []string // values are never stored
	CPUCount    int
	MemoryMB    int
	DiskSizeMB  int
	EnvdVersion string
	// EnvdAccessToken guards envd when Secure; it is returned to the sandbox's team.
	EnvdAccessToken string
	Secure          bool
	AutoPause       bool
	AutoResume      bool
	AllowInternet   bool
	StartedAt       time.Time
	EndAt           time.Time // the TTL: when the evictor kills or pauses it
	PausedAt        *time.Time
	KilledAt        *time.Time
	KillReason      reason.KillReason
	KillRequestID   string // the request that killed it, or "system"
	KillAPIKeyID    string // the key whose call killed it, when a client did
	CreatedBy       string // request id of the create call
	UpdatedAt       time.Time
	// AutoPauseKind is how the TTL's auto-pause pauses (reason.PauseFilesystem for E2B's
	// autoPauseMemory false); the server's default when "".
	AutoPauseKind reason.PauseKind
	// PauseKind is how a paused sandbox was paused; "" while it runs. A filesystem pause
	// has no processes to restore: its resume cold-boots on the kept files.
	PauseKind reason.PauseKind
	// Node is the cluster node that runs the sandbox (or ran it last, when paused or
	// killed); "" on a server that is no cluster's node.
	Node string
	// Runtime is the engine the sandbox runs on (runc, runsc); "" for records from before
	// there were two, which ran on runc.
	Runtime string
}

// SandboxFilter selects sandboxes for a listing.
type SandboxFilter struct {
	TeamID   string
	States   []SandboxState    // any of these; all live states when empty
	Metadata map[string]string // every pair must match
	Limit    int               // 1..100; 100 when 0
	// Order is by start time then id; "" is newest first, as E2B lists.
	Order ListOrder
	// StartedAfter keeps sandboxes started at or after it, when not zero.
	StartedAfter time.Time
	// Template keeps sandboxes of this template, by id or alias, when not "".
	Template string
	// Next is the opaque token a previous page returned.
	Next string
}

// ListOrder is a listing's direction by start time (reason.ListOrder, which the SDK shares).
type ListOrder = reason.ListOrder

// The list orders.
const (
	OrderDesc = reason.OrderDesc // newest first, the default
	OrderAsc  = reason.OrderAsc  // oldest first
)

// ParseListOrder reads "asc" or "desc" ("" is desc); anything else is an error.
func ParseListOrder(s string) (ListOrder, error) { return reason.ParseListOrder(s) }

// SandboxPage is one page of a listing.
type SandboxPage struct {
	Sandboxes []*Sandbox
	Next      string // "" on the last page
	Total     int    // sandboxes matching the filter, all pages
}

// Keys stores teams and API keys.
type Keys interface {
	CreateTeam(ctx context.Context, name string) (*Team, error)
	GetTeam(ctx context.Context, id string) (*Team, error)
	ListTeams(ctx context.Context) ([]*Team, error)
	// CreateAPIKey makes a new "e2b_<40 hex>" key and returns it in clear, once.
	CreateAPIKey(ctx context.Context, teamID, name string) (key string, rec *APIKey, err error)
	// Authenticate returns the live key and team for a key in clear, and records its use;
	// ErrNotFound for an unknown or revoked key.
	Authenticate(ctx context.Context, key string) (*APIKey, *Team, error)
	ListAPIKeys(ctx context.Context, teamID string) ([]*APIKey, error)
	RevokeAPIKey(ctx context.Context, teamID, id string) error
}

// Sandboxes stores sandbox records.
type Sandboxes interface {
	InsertSandbox(ctx context.Context, sb *Sandbox) error
	// UpdateSandbox replaces the record with sb's id; ErrNotFound when there is none.
	UpdateSandbox(ctx context.Context, sb *Sandbox) error
	GetSandbox(ctx context.Context, id string) (*Sandbox, error)
	ListSandboxes(ctx context.Context, f SandboxFilter) (*SandboxPage, error)
	// LiveSandboxes lists every running or paused sandbox of every team, for re-adoption
	// after a restart and for the TTL evictor.
	LiveSandboxes(ctx context.Context) ([]*Sandbox, error)
}

// Store is everything Cove persists.
type Store interface {
	Keys
	Sandboxes
	Close() error
}

// DB is one whole store, all that `cove server` keeps in it: the embedded SQLite file by
// default, or a PostgreSQL database (--state postgres://…). Both engines implement it, with
// the same meaning (the conformance suite, internal/store/storetest).
type DB interface {
	Store
	Activity
	EventStore
	LogStore
	CommandStore
	MetricStore
	TraceStore
	RetentionStore
	ConsoleSessions
	Secrets
	Identity
	PoolSizes
	TemplateBuilds
	Templates
	Records
	SealedSets
	// DownsampleSamples returns sandboxID's samples cut into at most points equal spans of
	// time, one sample each, oldest first (the console's charts).
	DownsampleSamples(ctx context.Context, sandboxID string, points int) ([]MetricSample, error)
}

// Span is when one sandbox lived: from its start to its kill (zero while it lives).
type Span struct {
	Started time.Time
	Killed  time.Time
}

// Activity answers team metrics from the sandbox records themselves.
type Activity interface {
	// SandboxSpans returns the spans of teamID's sandboxes that were alive at some point of
	// [from, to), oldest start first.
	SandboxSpans(ctx context.Context, teamID string, from, to time.Time) ([]Span, error)
}

// Sealer seals the secrets a record keeps (envd access tokens, webhook secrets, team secret
// values) before they reach a store, and opens them again; *vault.Vault is the server's. name
// is sealed in as associated data, so a sealed value copied into another record does not open.
type Sealer interface {
	Seal(name string, plain []byte) ([]byte, error)
	Unseal(name string, sealed []byte) ([]byte, error)
}

// SealedPrefix marks a secret kept sealed in a text column: "sealed:v1:" and the base64 of
// what the Sealer made.
const SealedPrefix = "sealed:v1:"

// SealText returns what a store keeps for plain under name: plain itself without a sealer
// (or for ""), its sealed form otherwise.
func SealText(s Sealer, name, plain string) (string, error) {
	if s == nil || plain == "" {
		return plain, nil
	}
	b, err := s.Seal(name, []byte(plain))
	if err != nil {
		return "", fmt.Errorf("seal %s: %w", name, err)
	}
	return SealedPrefix + base64.RawStdEncoding.EncodeToString(b), nil
}

// OpenText returns the secret a text column keeps for name: a value without SealedPrefix as
// it is (written before sealing began), a sealed one opened by s.
func OpenText(s Sealer, name, stored string) (string, error) {
	rest, ok := strings.CutPrefix(stored, SealedPrefix)
	if !ok {
		return stored, nil
	}
	if s == nil {
		return "", fmt.Errorf("%s is sealed and this store was opened without the vault", name)
	}
	b, err := base64.RawStdEncoding.DecodeString(rest)
	if err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	plain, err := s.Unseal(name, b)
	if err != nil {
		return "", err
	}
	return string(plain), nil
}

// TokenSealName and WebhookSealName are the names an envd token and a webhook secret are
// sealed under: a sealed value moved to another row does not open.
func TokenSealName(sandboxID string) string   { return "envd-token-" + sandboxID }
func WebhookSealName(webhookID string) string { return "webhook-secret-" + webhookID }

// SandboxCursor is the position after the last sandbox of a listing's page, in its order: the
// opaque nextToken both engines hand out and read back.
type SandboxCursor struct {
	Order     ListOrder
	StartedAt time.Time // at the store's precision, microseconds
	ID        string
}

func (c SandboxCursor) String() string {
	return base64.RawURLEncoding.EncodeToString([]byte(string(c.Order) + ":" + strconv.FormatInt(c.StartedAt.UnixMicro(), 10) + ":" + c.ID))
}

// ParseSandboxCursor reads a nextToken; a token no store made is an error.
func ParseSandboxCursor(s string) (SandboxCursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return SandboxCursor{}, errors.New("not base64")
	}
	order, rest, ok1 := strings.Cut(string(b), ":")
	at, id, ok2 := strings.Cut(rest, ":")
	us, err := strconv.ParseInt(at, 10, 64)
	o, oerr := ParseListOrder(order)
	if !ok1 || !ok2 || err != nil || oerr != nil || order == "" || id == "" {
		return SandboxCursor{}, errors.New("malformed")
	}
	return SandboxCursor{Order: o, StartedAt: time.UnixMicro(us).UTC(), ID: id}, nil
}
