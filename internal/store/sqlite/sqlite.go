package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"modernc.org/sqlite"

	"github.com/cove-dev/cove/internal/store"
)

// busyTimeout is how long a write waits for another process's write to finish before
// failing with SQLITE_BUSY. Cove's transactions last milliseconds; this is generous.
const busyTimeout = 10 * time.Second

//go:embed migrations/*.sql
var migrations embed.FS

// DB is a store.Store on one SQLite file. It is safe for concurrent use, and other
// processes may open the same file at the same time.
type DB struct {
	write *sql.DB // one connection: every write goes through it, in BEGIN IMMEDIATE
	read  *sql.DB // query_only connections, for reads

	stopFill func()       // stops the background filling of log chunk filters
	seal     store.Sealer // seals the secrets records keep; nil: they are stored as given
}

var (
	_ store.Store = (*DB)(nil)
	_ store.DB    = (*DB)(nil)
)

// Open opens the SQLite database at path, creating it if needed, and brings its schema up
// to date.
func Open(ctx context.Context, path string, opts ...Option) (*DB, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	// The database holds envd tokens and webhook secrets: owner only. SQLite gives its -wal
	// and -shm files the database file's mode.
	if err := ownerOnly(abs); err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	// A file: URI so that '?' or '#' in the path are escaped rather than read as parameters.
	uri := (&url.URL{Scheme: "file", Path: abs}).String()
	common := "_pragma=busy_timeout(" + strconv.FormatInt(busyTimeout.Milliseconds(), 10) + ")" +
		"&_pragma=foreign_keys(1)"

	// synchronous=NORMAL in WAL mode: a commit survives a crash of Cove, and the file
	// survives a power loss, possibly without its last commits. Worth the fsync per write.
	write, err := sql.Open("sqlite", uri+"?"+common+
		"&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	write.SetMaxOpenConns(1)
	write.SetMaxIdleConns(1)
	write.SetConnMaxLifetime(0)
	write.SetConnMaxIdleTime(0)

	db := &DB{write: write}
	for _, o := range opts {
		o(db)
	}
	if err := db.migrate(ctx); err != nil {
		write.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	if err := db.sealClear(ctx); err != nil {
		write.Close()
		return nil, fmt.Errorf("open store %s: seal the secrets kept in the clear: %w", path, err)
	}

	read, err := sql.Open("sqlite", uri+"?"+common+"&_query_only=1")
	if err != nil {
		write.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	n := max(4, runtime.GOMAXPROCS(0))
	read.SetMaxOpenConns(n)
	read.SetMaxIdleConns(n)
	db.read = read
	db.startFillingLogFilters(ctx)
	return db, nil
}

// Close closes the database. Calls after Close fail.
func (db *DB) Close() error {
	db.stopFill()
	return errors.Join(db.read.Close(), db.write.Close())
}

// migration is one embedded migrations/NNNN_name.sql file.
type migration struct {
	version int
	name    string
	sql     string
	run     func(context.Context, *sql.Tx) error // a migration in Go, instead of sql
}

// goMigrations are the migrations that are code, not SQL: they move data SQL cannot encode.
var goMigrations = []migration{
	{version: 25, name: "old_logs_to_chunks", run: moveOldLogs},
}

func loadMigrations() ([]migration, error) {
	files, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	var ms []migration
	for _, f := range files {
		base := strings.TrimSuffix(filepath.Base(f), ".sql")
		num, name, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s: name is not NNNN_name.sql", f)
		}
		b, err := migrations.ReadFile(f)
		if err != nil {
			return nil, err
		}
		ms = append(ms, migration{version: v, name: name, sql: string(b)})
	}
	ms = append(ms, goMigrations...)
	sort.Slice(ms, func(i, j int) bool { return ms[i].version < ms[j].version })
	for i := 1; i < len(ms); i++ {
		if ms[i].version == ms[i-1].version {
			return nil, fmt.Errorf("migration %d: two files", ms[i].version)
		}
	}
	return ms, nil
}

// migrate applies the migrations the file lacks, all in one transaction, so a process
// opening the file concurrently sees either none or all of them.
func (db *DB) migrate(ctx context.Context) error {
	ms, err := loadMigrations()
	if err != nil {
		return err
	}
	return db.writeTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
			version    INTEGER PRIMARY KEY,
			name       TEXT NOT NULL,
			applied_at INTEGER NOT NULL
		) STRICT`); err != nil {
			return fmt.Errorf("schema_migrations: %w", err)
		}
		// Every migration not yet recorded is applied, in order, even one numbered below the
		// highest applied: migrations written on parallel branches land in any order.
		applied := map[int]bool{}
		rows, err := tx.QueryContext(ctx, `SELECT version FROM schema_migrations`)
		if err != nil {
			return fmt.Errorf("schema_migrations: %w", err)
		}
		have := 0
		for rows.Next() {
			var v int
			if err := rows.Scan(&v); err != nil {
				rows.Close()
				return fmt.Errorf("schema_migrations: %w", err)
			}
			applied[v], have = true, max(have, v)
		}
		rows.Close()
		if latest := ms[len(ms)-1].version; have > latest {
			return fmt.Errorf("schema version %d is newer than this binary's %d", have, latest)
		}
		for _, m := range ms {
			if applied[m.version] {
				continue
			}
			if m.run != nil {
				err = m.run(ctx, tx)
			} else {
				_, err = tx.ExecContext(ctx, m.sql)
			}
			if err != nil {
				return fmt.Errorf("migration %04d_%s: %w", m.version, m.name, err)
			}
			if _, err := tx.ExecContext(ctx,
				`INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
				m.version, m.name, toMicros(time.Now())); err != nil {
				return fmt.Errorf("migration %04d_%s: %w", m.version, m.name, err)
			}
		}
		return nil
	})
}

// writeTx runs fn in a write transaction (BEGIN IMMEDIATE) and commits it if fn succeeds.
func (db *DB) writeTx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := db.write.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// isCode reports whether err is an SQLite error with the extended result code code.
func isCode(err error, code int) bool {
	var e *sqlite.Error
	return errors.As(err, &e) && e.Code() == code
}

// now is time.Now at the precision the store keeps, so values handed back match stored ones.
func now() time.Time { return fromMicros(toMicros(time.Now())) }

// toMicros and fromMicros carry times as unix microseconds. The zero time round-trips.
func toMicros(t time.Time) int64 { return t.UnixMicro() }

func fromMicros(us int64) time.Time { return time.UnixMicro(us).UTC() }

func toNullMicros(t *time.Time) sql.NullInt64 {
	if t == nil {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: t.UnixMicro(), Valid: true}
}

func fromNullMicros(n sql.NullInt64) *time.Time {
	if !n.Valid {
		return nil
	}
	t := fromMicros(n.Int64)
	return &t
}

// ownerOnly creates the database file with mode 0600, or narrows an existing one (and its
// -wal and -shm files) to it.
func ownerOnly(path string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	f.Close()
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if err := os.Chmod(p, 0o600); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}
