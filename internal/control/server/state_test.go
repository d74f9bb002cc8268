package server

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/store"
)

func TestParseState(t *testing.T) {
	tests := []struct {
		name    string
		value   string
		want    State
		wantErr string // "" for none
	}{
		{"empty is the data dir's SQLite file", "", State{Engine: EngineSQLite}, ""},
		{"sqlite is the data dir's SQLite file", "sqlite", State{Engine: EngineSQLite}, ""},
		{"sqlite:///PATH is that file", "sqlite:///srv/cove/records.db", State{Engine: EngineSQLite, Path: "/srv/cove/records.db"}, ""},
		{"a postgres URL is kept as given", "postgres://cove@db:5432/cove?sslmode=disable",
			State{Engine: EnginePostgres, DSN: "postgres://cove@db:5432/cove?sslmode=disable"}, ""},
		{"postgresql:// is postgres too", "postgresql://cove:pw@db/cove", State{Engine: EnginePostgres, DSN: "postgresql://cove:pw@db/cove"}, ""},
		{"a relative SQLite path is refused", "sqlite://records.db", State{}, "sqlite:///ABSOLUTE/PATH"},
		{"an unknown engine is refused", "mysql://root@db/cove", State{}, `unknown engine "mysql"`},
		{"a bare word is refused", "postgres", State{}, "want sqlite, sqlite:///PATH or postgres://"},
		{"a postgres URL without a host is refused", "postgres:///cove", State{}, "names its host"},
		{"a value that is no URL is refused without repeating it", "postgres://cove:s3cr%t@db/cove", State{}, "is not a URL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseState(tt.value)
			if tt.wantErr == "" {
				if err != nil || got != tt.want {
					t.Fatalf("ParseState(%q) = %+v, %v; want %+v", tt.value, got, err, tt.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "--state") {
				t.Fatalf("ParseState(%q) = %+v, %v; want an error naming --state and %q", tt.value, got, err, tt.wantErr)
			}
			if strings.Contains(err.Error(), "s3cr") {
				t.Errorf("the error repeats the password: %v", err)
			}
		})
	}
}

func TestStateStringNeverShowsAPassword(t *testing.T) {
	for _, value := range []string{
		"postgres://cove:hunter2@db:5432/cove",
		"postgres://cove@db:5432/cove?sslmode=disable&password=hunter2",
	} {
		st, err := ParseState(value)
		if err != nil {
			t.Fatal(err)
		}
		if s := st.String(); strings.Contains(s, "hunter2") || !strings.Contains(s, "db:5432/cove") {
			t.Errorf("String of %q = %q", value, s)
		}
	}
}

// TestOpenStoreFailsClearly opens states that cannot work: each is an error naming the flag,
// without the password, and promptly (a database that does not answer is not waited on for
// the system's TCP timeout).
func TestOpenStoreFailsClearly(t *testing.T) {
	refused, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := refused.Addr().String()
	refused.Close() // nothing listens there now
	tests := []struct {
		name, state, wantErr string
	}{
		{"a database nobody answers at", "postgres://cove:hunter2@" + addr + "/cove?sslmode=disable", "cannot reach PostgreSQL"},
		{"a database nobody answers at, its password a parameter", "postgres://cove@" + addr + "/cove?password=hunter2&sslmode=disable", "cannot reach PostgreSQL"},
		{"a DSN pgx cannot read", "postgres://cove:hunter2@db/cove?sslmode=sideways", "not a PostgreSQL address"},
		{"a SQLite file in a directory that does not exist", "sqlite://" + filepath.Join(t.TempDir(), "missing", "cove.db"), "--state"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			db, _, err := openStore(ctx, t.TempDir(), tt.state, nil)
			if err == nil {
				db.Close()
				t.Fatalf("openStore(%q) succeeded", tt.state)
			}
			if !strings.Contains(err.Error(), "--state") || !strings.Contains(err.Error(), tt.wantErr) || strings.Contains(err.Error(), "hunter2") {
				t.Errorf("openStore: %v; want an error naming --state and %q, without the password", err, tt.wantErr)
			}
		})
	}
}

func TestOpenStoreOnASQLiteFileElsewhere(t *testing.T) {
	data, elsewhere := t.TempDir(), filepath.Join(t.TempDir(), "records.db")
	db, _, err := openStore(context.Background(), data, "sqlite://"+elsewhere, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.CreateTeam(context.Background(), "acme"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(elsewhere); err != nil {
		t.Errorf("no store at %s: %v", elsewhere, err)
	}
	if _, err := os.Stat(dbPath(data)); !os.IsNotExist(err) {
		t.Errorf("a store in the data dir too: %v", err)
	}
	if _, err := os.Stat(filepath.Join(data, "vault")); err != nil {
		t.Errorf("the vault is not in the data dir: %v", err)
	}
}

// countingSandboxes counts the record reads a real store answers.
type countingSandboxes struct {
	store.Sandboxes
	reads int
}

func (c *countingSandboxes) GetSandbox(ctx context.Context, id string) (*store.Sandbox, error) {
	c.reads++
	return c.Sandboxes.GetSandbox(ctx, id)
}

func TestTheLogTeeAsksASandboxsTeamOnce(t *testing.T) {
	ctx := context.Background()
	db, _, err := openStore(ctx, t.TempDir(), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	team, err := db.CreateTeam(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	counting := &countingSandboxes{Sandboxes: db}
	of := newTeamOf(counting)
	if got := of.team("isb_later"); got != "" {
		t.Fatalf("a sandbox not recorded yet has team %q", got)
	}
	if err := db.InsertSandbox(ctx, &store.Sandbox{ID: "isb_later", TeamID: team.ID, TemplateID: "base", State: store.StateRunning, StartedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	for range 100 { // a proxied stream's lines
		if got := of.team("isb_later"); got != team.ID {
			t.Fatalf("team %q, want %q", got, team.ID)
		}
	}
	if counting.reads != 2 {
		t.Errorf("%d reads of the store for 101 lines, want 2 (the miss before its record, then one)", counting.reads)
	}
}
