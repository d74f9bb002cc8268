// Package postgres is Cove's store on PostgreSQL 15+ (pgx v5), for a cluster of nodes that
// share one database: `cove server --state postgres://USER@HOST:PORT/DB`. It implements the
// same internal/store interfaces as the embedded SQLite store, with the same meaning; the
// conformance suite (internal/store/storetest) runs every interface against both engines.
//
// The schema is versioned by goose migrations (migrations/*.sql, embedded), applied at Open
// under goose's lock, so nodes starting together migrate once. Two writes that must agree run
// in one transaction.
//
// It owns the persistent shapes on PostgreSQL; it must not import the orchestrator, the
// runtime, events, collect or the edges.
package postgres

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/cove-dev/cove/internal/store"
)

//go:embed migrations/*.sql
var migrations embed.FS

// DB is the store on one PostgreSQL database. Safe for concurrent use, by many processes.
type DB struct {
	pool  *pgxpool.Pool
	seal  store.Sealer // seals the secrets records keep; nil: stored as given
	parts partitions   // the day partitions this process knows exist
}

// Option configures Open.
type Option func(*DB)

// WithSealer makes the DB seal the secrets its records keep (envd tokens).
func WithSealer(s store.Sealer) Option { return func(db *DB) { db.seal = s } }

var (
	_ store.DB              = (*DB)(nil)
	_ store.Keys            = (*DB)(nil)
	_ store.Sandboxes       = (*DB)(nil)
	_ store.Activity        = (*DB)(nil)
	_ store.Secrets         = (*DB)(nil)
	_ store.ConsoleSessions = (*DB)(nil)
	_ store.EventStore      = (*DB)(nil)
	_ store.LogStore        = (*DB)(nil)
	_ store.CommandStore    = (*DB)(nil)
	_ store.MetricStore     = (*DB)(nil)
	_ store.TraceStore      = (*DB)(nil)
)

// Open connects to the database dsn names (postgres://USER@HOST:PORT/DB?…) and brings its
// schema up to date.
func Open(ctx context.Context, dsn string, opts ...Option) (*DB, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// pgx's message quotes the address, password masked its own way; say it once, ours.
		return nil, fmt.Errorf("%w: state %q is not a PostgreSQL address (postgres://USER@HOST:PORT/DB)", store.ErrInvalid, redactDSN(dsn))
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", redactDSN(dsn), err)
	}
	db := &DB{pool: pool}
	for _, o := range opts {
		o(db)
	}
	// A database that does not answer fails here, in reachTimeout, rather than after the
	// system's TCP timeout, minutes later.
	pctx, cancel := context.WithTimeout(ctx, reachTimeout)
	err = pool.Ping(pctx)
	cancel()
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("cannot reach PostgreSQL at %s: %w", redactDSN(dsn), err)
	}
	if err := db.migrate(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open store %s: %w", redactDSN(dsn), err)
	}
	return db, nil
}

// reachTimeout is how long Open waits for the database to answer at all.
const reachTimeout = 15 * time.Second

// redactDSN drops a password from dsn (user:password@ of a URL, and a password= parameter),
// for errors; it does not need dsn to parse.
func redactDSN(dsn string) string {
	if i := strings.Index(dsn, "password="); i >= 0 {
		end := strings.IndexAny(dsn[i:], "& ")
		rest := ""
		if end >= 0 {
			rest = dsn[i+end:]
		}
		dsn = dsn[:i] + "password=***" + rest
	}
	scheme, rest, ok := strings.Cut(dsn, "://")
	at := strings.LastIndex(rest, "@")
	if !ok || at < 0 {
		return dsn
	}
	user, _, hasPassword := strings.Cut(rest[:at], ":")
	if !hasPassword {
		return dsn
	}
	return scheme + "://" + user + ":***" + rest[at:]
}

// migrate applies the migrations the database lacks, under goose's advisory lock.
func (db *DB) migrate(ctx context.Context) error {
	sqlDB := stdlib.OpenDBFromPool(db.pool)
	defer sqlDB.Close()
	fsys, err := subFS()
	if err != nil {
		return err
	}
	locker, err := newLocker()
	if err != nil {
		return err
	}
	// A migration numbered below the highest applied one is applied too, as SQLite's are:
	// migrations written on parallel branches land in any order.
	p, err := goose.NewProvider(goose.DialectPostgres, sqlDB, fsys, goose.WithSessionLocker(locker), goose.WithAllowOutofOrder(true))
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	return nil
}

// Close closes the pool.
func (db *DB) Close() error {
	db.pool.Close()
	return nil
}

// Pool is the connection pool, for the cluster's own tables (leases, reservations).
func (db *DB) Pool() *pgxpool.Pool { return db.pool }

// isCode reports whether err is PostgreSQL's error code (23505 unique_violation, …).
func isCode(err error, code string) bool {
	var e *pgconn.PgError
	return errors.As(err, &e) && e.Code == code
}

const (
	uniqueViolation     = "23505"
	foreignKeyViolation = "23503"
)

// now is time.Now at the precision the store keeps (microseconds), in UTC.
func now() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }

// utc reads a stored time back as the store hands times out: UTC.
func utc(t time.Time) time.Time { return t.UTC() }

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func hashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

func (db *DB) sealText(name, plain string) (string, error) {
	return store.SealText(db.seal, name, plain)
}
func (db *DB) openText(name, stored string) (string, error) {
	return store.OpenText(db.seal, name, stored)
}

// subFS is the migrations directory as goose reads it.
func subFS() (fs.FS, error) { return fs.Sub(migrations, "migrations") }

func newLocker() (lock.SessionLocker, error) { return lock.NewPostgresSessionLocker() }
