package server

import (
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
)

// Engine is the database a server's records live in.
type Engine string

const (
	EngineSQLite   Engine = "sqlite"   // an embedded file: the data dir's cove.db by default
	EnginePostgres Engine = "postgres" // a PostgreSQL 15+ database
)

// State is where a server's records live, read from --state by ParseState.
type State struct {
	Engine Engine
	Path   string // EngineSQLite: the file; "" is the data dir's cove.db
	DSN    string // EnginePostgres: the address as given, password and all (never logged: String redacts it)
}

// ParseState reads a --state value: "" or "sqlite" (the data dir's SQLite file),
// sqlite:///PATH (another SQLite file), or postgres://USER[:PASSWORD]@HOST:PORT/DB?… (also
// postgresql://). A value it cannot read is an error that names the flag and the forms, and
// never repeats a password.
func ParseState(value string) (State, error) {
	if value == "" || value == "sqlite" {
		return State{Engine: EngineSQLite}, nil
	}
	scheme, _, ok := strings.Cut(value, "://")
	if !ok {
		return State{}, fmt.Errorf("--state %q: want sqlite, sqlite:///PATH or postgres://USER@HOST:PORT/DB", value)
	}
	u, err := url.Parse(value)
	if err != nil {
		// url's message quotes the value, password and all.
		return State{}, fmt.Errorf("--state: %s://… is not a URL (want postgres://USER@HOST:PORT/DB or sqlite:///PATH)", scheme)
	}
	switch strings.ToLower(u.Scheme) {
	case "sqlite":
		if u.Host != "" || u.User != nil || u.RawQuery != "" || !filepath.IsAbs(u.Path) {
			return State{}, fmt.Errorf("--state %q: a SQLite file is sqlite:///ABSOLUTE/PATH (three slashes)", redactURL(u))
		}
		return State{Engine: EngineSQLite, Path: filepath.Clean(u.Path)}, nil
	case "postgres", "postgresql":
		if u.Host == "" {
			return State{}, fmt.Errorf("--state %q: a PostgreSQL address names its host: postgres://USER@HOST:PORT/DB", redactURL(u))
		}
		return State{Engine: EnginePostgres, DSN: value}, nil
	default:
		return State{}, fmt.Errorf("--state: unknown engine %q (want sqlite or postgres)", u.Scheme)
	}
}

// String is the state as logs and errors show it: a PostgreSQL address without its password.
func (s State) String() string {
	switch {
	case s.Engine == EnginePostgres:
		u, err := url.Parse(s.DSN)
		if err != nil {
			return "postgres://…"
		}
		return redactURL(u)
	case s.Path != "":
		return "sqlite://" + s.Path
	default:
		return "sqlite (the data dir's cove.db)"
	}
}

// redactURL is u with its password, in the user part or the query, replaced by "xxxxx".
func redactURL(u *url.URL) string {
	c := *u
	if q := c.Query(); q.Has("password") {
		q.Set("password", "xxxxx")
		c.RawQuery = q.Encode()
	}
	return c.Redacted()
}
