// Package sqlite implements store.Store on a single SQLite file.
//
// The one idea: SQLite allows one writer at a time per file, across every process that
// opens it (cove server and the cove apikey CLI alike), so a DB keeps two pools: a write
// pool of exactly one connection whose transactions start with BEGIN IMMEDIATE, and a pool
// of read-only connections. Writers in this process queue in Go for that one connection;
// writers in other processes wait in SQLite's busy handler (busy_timeout) at BEGIN, where
// waiting is safe, never midway through a transaction. Readers never wait: WAL gives each a
// snapshot.
//
// The schema lives in migrations/*.sql, embedded and applied in order, each once, inside one
// transaction, recorded in schema_migrations. Times are stored as unix microseconds (the
// precision PostgreSQL would keep) and come back in UTC.
package sqlite
