package sqlite

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/sdk/reason"
)

func open(t testing.TB, path string) *DB {
	t.Helper()
	db, err := Open(context.Background(), path)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func newDB(t testing.TB) *DB {
	t.Helper()
	return open(t, filepath.Join(t.TempDir(), "cove.db"))
}

func newTeam(t testing.TB, db *DB, name string) *store.Team {
	t.Helper()
	team, err := db.CreateTeam(context.Background(), name)
	if err != nil {
		t.Fatalf("CreateTeam: %v", err)
	}
	return team
}

// base is a fixed instant at the store's precision, so tests compare times exactly.
var base = time.Date(2026, 3, 1, 12, 0, 0, 123456000, time.UTC)

func sandbox(teamID, id string, startedAt time.Time, state store.SandboxState, md map[string]string) *store.Sandbox {
	return &store.Sandbox{
		ID: id, TeamID: teamID, TemplateID: "base", State: state, Metadata: md,
		CPUCount: 2, MemoryMB: 512, StartedAt: startedAt, EndAt: startedAt.Add(5 * time.Minute),
		UpdatedAt: startedAt,
	}
}

func insert(t testing.TB, db *DB, sbs ...*store.Sandbox) {
	t.Helper()
	for _, sb := range sbs {
		if err := db.InsertSandbox(context.Background(), sb); err != nil {
			t.Fatalf("InsertSandbox(%s): %v", sb.ID, err)
		}
	}
}

func ids(sbs []*store.Sandbox) []string {
	out := []string{}
	for _, sb := range sbs {
		out = append(out, sb.ID)
	}
	return out
}

func TestOpen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ms, err := loadMigrations()
	if err != nil {
		t.Fatal(err)
	}

	t.Run("reopening a file applies no migration twice and keeps its data", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "cove.db")
		db, err := Open(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		team := newTeam(t, db, "acme")
		db.Close()
		for range 3 {
			db, err = Open(ctx, path)
			if err != nil {
				t.Fatalf("reopen: %v", err)
			}
			var n, maxV int
			if err := db.read.QueryRow(`SELECT count(*), max(version) FROM schema_migrations`).Scan(&n, &maxV); err != nil {
				t.Fatal(err)
			}
			if n != len(ms) || maxV != ms[len(ms)-1].version {
				t.Fatalf("schema_migrations has %d rows up to %d, want %d up to %d", n, maxV, len(ms), ms[len(ms)-1].version)
			}
			if _, err := db.GetTeam(ctx, team.ID); err != nil {
				t.Fatalf("team lost on reopen: %v", err)
			}
			db.Close()
		}
	})

	t.Run("the file is in WAL mode with foreign keys on", func(t *testing.T) {
		t.Parallel()
		db := newDB(t)
		var mode string
		var fk, timeout int
		if err := db.write.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil {
			t.Fatal(err)
		}
		if err := db.write.QueryRow(`PRAGMA foreign_keys`).Scan(&fk); err != nil {
			t.Fatal(err)
		}
		if err := db.read.QueryRow(`PRAGMA busy_timeout`).Scan(&timeout); err != nil {
			t.Fatal(err)
		}
		if mode != "wal" || fk != 1 || timeout != int(busyTimeout.Milliseconds()) {
			t.Fatalf("journal_mode=%s foreign_keys=%d busy_timeout=%d", mode, fk, timeout)
		}
	})

	t.Run("a path with URI characters in it opens as a plain file", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		path := filepath.Join(dir, "we?ird#name%20.db")
		newTeam(t, open(t, path), "acme")
		if _, err := os.Stat(path); err != nil {
			t.Fatalf("file not at %s: %v", path, err)
		}
	})

	t.Run("a schema newer than this binary is refused", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "cove.db")
		db, err := Open(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.write.Exec(`INSERT INTO schema_migrations VALUES (9999, 'future', 0)`); err != nil {
			t.Fatal(err)
		}
		db.Close()
		if db, err := Open(ctx, path); err == nil {
			db.Close()
			t.Fatal("Open succeeded on a schema from the future")
		}
	})

	t.Run("the read pool cannot write", func(t *testing.T) {
		t.Parallel()
		db := newDB(t)
		if _, err := db.read.Exec(`INSERT INTO teams VALUES ('x', 'x', 0)`); err == nil {
			t.Fatal("write through the read pool succeeded")
		}
	})
}

func TestTeams(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newDB(t)
	a, b := newTeam(t, db, "acme"), newTeam(t, db, "globex")

	t.Run("team ids are team_ and 16 hex digits", func(t *testing.T) {
		for _, team := range []*store.Team{a, b} {
			if !regexp.MustCompile(`^team_[0-9a-f]{16}$`).MatchString(team.ID) {
				t.Fatalf("team id %q", team.ID)
			}
		}
	})
	t.Run("a team reads back as created", func(t *testing.T) {
		got, err := db.GetTeam(ctx, a.ID)
		if err != nil || !reflect.DeepEqual(got, a) {
			t.Fatalf("GetTeam = %+v, %v; want %+v", got, err, a)
		}
	})
	t.Run("an unknown team is not found", func(t *testing.T) {
		if _, err := db.GetTeam(ctx, "team_0000000000000000"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("err = %v, want ErrNotFound", err)
		}
	})
	t.Run("teams list oldest first", func(t *testing.T) {
		got, err := db.ListTeams(ctx)
		if err != nil || !reflect.DeepEqual(got, []*store.Team{a, b}) {
			t.Fatalf("ListTeams = %v, %v", got, err)
		}
	})
}

func TestAPIKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newDB(t)
	team, other := newTeam(t, db, "acme"), newTeam(t, db, "globex")
	key, rec, err := db.CreateAPIKey(ctx, team.ID, "ci")
	if err != nil {
		t.Fatal(err)
	}

	t.Run("a key is e2b_ and 40 lowercase hex digits, masked head and tail", func(t *testing.T) {
		if !regexp.MustCompile(`^e2b_[0-9a-f]{40}$`).MatchString(key) {
			t.Fatalf("key %q", key)
		}
		if want := key[:8] + "…" + key[40:]; rec.Mask != want {
			t.Fatalf("mask %q, want %q", rec.Mask, want)
		}
		if !regexp.MustCompile(`^key_[0-9a-f]{16}$`).MatchString(rec.ID) {
			t.Fatalf("key id %q", rec.ID)
		}
	})

	t.Run("the key authenticates as its team and records its use", func(t *testing.T) {
		k, tm, err := db.Authenticate(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if k.ID != rec.ID || !reflect.DeepEqual(tm, team) || k.LastUsed == nil {
			t.Fatalf("Authenticate = %+v, %+v", k, tm)
		}
		keys, err := db.ListAPIKeys(ctx, team.ID)
		if err != nil || len(keys) != 1 || keys[0].LastUsed == nil || !keys[0].LastUsed.Equal(*k.LastUsed) {
			t.Fatalf("ListAPIKeys = %v, %v; want last_used %v", keys, err, k.LastUsed)
		}
	})

	t.Run("use within a minute does not write last_used again", func(t *testing.T) {
		first, _, err := db.Authenticate(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		second, _, err := db.Authenticate(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if !second.LastUsed.Equal(*first.LastUsed) {
			t.Fatalf("last_used moved from %v to %v within a minute", first.LastUsed, second.LastUsed)
		}
	})

	for _, tc := range []struct{ name, key string }{
		{"a wrong key is not found", "e2b_" + "0123456789012345678901234567890123456789"},
		{"an empty key is not found", ""},
		{"the key's hash is not a key", hashKey(key)},
		{"the key's mask is not a key", rec.Mask},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := db.Authenticate(ctx, tc.key); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("err = %v, want ErrNotFound", err)
			}
		})
	}

	t.Run("a key for an unknown team is not created", func(t *testing.T) {
		if _, _, err := db.CreateAPIKey(ctx, "team_nope", "x"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("err = %v, want ErrNotFound", err)
		}
	})

	t.Run("another team cannot revoke the key", func(t *testing.T) {
		if err := db.RevokeAPIKey(ctx, other.ID, rec.ID); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("err = %v, want ErrNotFound", err)
		}
		if _, _, err := db.Authenticate(ctx, key); err != nil {
			t.Fatalf("key stopped working: %v", err)
		}
	})

	t.Run("a revoked key is not found, stays listed, and revokes twice quietly", func(t *testing.T) {
		key2, rec2, err := db.CreateAPIKey(ctx, team.ID, "laptop")
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if err := db.RevokeAPIKey(ctx, team.ID, rec2.ID); err != nil {
				t.Fatalf("RevokeAPIKey: %v", err)
			}
		}
		if _, _, err := db.Authenticate(ctx, key2); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("revoked key: err = %v, want ErrNotFound", err)
		}
		if _, _, err := db.Authenticate(ctx, key); err != nil {
			t.Fatalf("the other key stopped working: %v", err)
		}
		keys, err := db.ListAPIKeys(ctx, team.ID)
		if err != nil || len(keys) != 2 || keys[0].RevokedAt != nil || keys[1].RevokedAt == nil || keys[1].Name != "laptop" {
			t.Fatalf("ListAPIKeys = %+v, %v", keys, err)
		}
	})

	t.Run("keys list per team", func(t *testing.T) {
		keys, err := db.ListAPIKeys(ctx, other.ID)
		if err != nil || len(keys) != 0 {
			t.Fatalf("ListAPIKeys(other) = %v, %v", keys, err)
		}
		if _, err := db.ListAPIKeys(ctx, "team_nope"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("unknown team: err = %v, want ErrNotFound", err)
		}
	})
}

func TestAPIKeyNeverStoredInClear(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "cove.db")
	db, err := Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	team := newTeam(t, db, "acme")
	var keys []string
	for range 5 {
		key, _, err := db.CreateAPIKey(context.Background(), team.ID, "k")
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, key)
	}
	// Scan the database, WAL and shared memory files, before and after a checkpoint.
	scan := func(when string) {
		files, _ := filepath.Glob(filepath.Join(dir, "*"))
		var all []byte
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, b...)
		}
		for _, key := range keys {
			if bytes.Contains(all, []byte(key)) || bytes.Contains(all, []byte(key[4:])) {
				t.Fatalf("%s: key %s found in clear in %v", when, key[:8], files)
			}
			// The scan can see what was written: the hash is there.
			if !bytes.Contains(all, []byte(hashKey(key))) {
				t.Fatalf("%s: hash of %s not found; the scan sees nothing", when, key[:8])
			}
		}
	}
	scan("with the WAL")
	db.Close()
	scan("after close")
}

func TestSandboxRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newDB(t)
	team, other := newTeam(t, db, "acme"), newTeam(t, db, "globex")
	paused, killed := base.Add(time.Minute), base.Add(2*time.Minute)

	for _, tc := range []struct {
		name string
		sb   *store.Sandbox
	}{
		{"a sandbox with every field set reads back the same", &store.Sandbox{
			ID: "sb-full", TeamID: team.ID, TemplateID: "tpl", Alias: "python", State: store.StateKilled,
			Metadata:    map[string]string{"a": "1", "user.name": `O'Brien "x"`, "ü": "ß"},
			EnvVarNames: []string{"TOKEN", "HOME"},
			CPUCount:    4, MemoryMB: 2048, DiskSizeMB: 10240, EnvdVersion: "0.2.0",
			EnvdAccessToken: "tok", Secure: true, AutoPause: true, AutoResume: true, AllowInternet: true,
			StartedAt: base, EndAt: base.Add(time.Hour), PausedAt: &paused, KilledAt: &killed,
			KillReason: reason.KillTimeout, KillRequestID: "req_1", KillAPIKeyID: "key_1",
			CreatedBy: "req_0", UpdatedAt: killed,
			AutoPauseKind: reason.PauseFilesystem, PauseKind: reason.PauseFilesystem,
		}},
		{"nil pointers, maps and slices read back nil", &store.Sandbox{
			ID: "sb-nil", TeamID: team.ID, State: store.StateRunning, StartedAt: base, EndAt: base, UpdatedAt: base,
		}},
		{"empty maps and slices read back empty, not nil", &store.Sandbox{
			ID: "sb-empty", TeamID: team.ID, State: store.StatePaused,
			Metadata: map[string]string{}, EnvVarNames: []string{}, StartedAt: base, EndAt: base, UpdatedAt: base,
		}},
		{"zero times read back zero", &store.Sandbox{ID: "sb-zero", TeamID: team.ID, State: store.StateRunning}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			insert(t, db, tc.sb)
			got, err := db.GetSandbox(ctx, tc.sb.ID)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.sb) {
				t.Fatalf("GetSandbox =\n%+v\nwant\n%+v", got, tc.sb)
			}
		})
	}

	t.Run("an update replaces every field, setting and clearing", func(t *testing.T) {
		sb, err := db.GetSandbox(ctx, "sb-full")
		if err != nil {
			t.Fatal(err)
		}
		sb.TeamID, sb.TemplateID, sb.Alias, sb.State = other.ID, "tpl2", "", store.StateRunning
		sb.Metadata, sb.EnvVarNames = nil, []string{}
		sb.CPUCount, sb.MemoryMB, sb.DiskSizeMB, sb.EnvdVersion, sb.EnvdAccessToken = 1, 1, 1, "0.3.0", ""
		sb.Secure, sb.AutoPause, sb.AutoResume, sb.AllowInternet = false, false, false, false
		sb.StartedAt, sb.EndAt, sb.PausedAt, sb.KilledAt = base.Add(time.Second), base.Add(time.Hour), nil, nil
		sb.KillReason, sb.KillRequestID, sb.KillAPIKeyID, sb.CreatedBy = "", "", "", "req_x"
		sb.UpdatedAt = base.Add(3 * time.Hour)
		sb.AutoPauseKind, sb.PauseKind = "", reason.PauseSnapshot
		if err := db.UpdateSandbox(ctx, sb); err != nil {
			t.Fatal(err)
		}
		got, err := db.GetSandbox(ctx, sb.ID)
		if err != nil || !reflect.DeepEqual(got, sb) {
			t.Fatalf("after update:\n%+v, %v\nwant\n%+v", got, err, sb)
		}
	})

	t.Run("inserting an existing id conflicts", func(t *testing.T) {
		err := db.InsertSandbox(ctx, sandbox(team.ID, "sb-nil", base, store.StateRunning, nil))
		if !errors.Is(err, store.ErrConflict) {
			t.Fatalf("err = %v, want ErrConflict", err)
		}
	})
	t.Run("updating a missing sandbox is not found", func(t *testing.T) {
		err := db.UpdateSandbox(ctx, sandbox(team.ID, "sb-missing", base, store.StateRunning, nil))
		if !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("err = %v, want ErrNotFound", err)
		}
	})
	t.Run("getting a missing sandbox is not found", func(t *testing.T) {
		if _, err := db.GetSandbox(ctx, "sb-missing"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("err = %v, want ErrNotFound", err)
		}
	})
	t.Run("a sandbox of an unknown team is not inserted", func(t *testing.T) {
		err := db.InsertSandbox(ctx, sandbox("team_nope", "sb-orphan", base, store.StateRunning, nil))
		if !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("err = %v, want ErrNotFound", err)
		}
	})
	t.Run("a sandbox in an unknown state is not inserted", func(t *testing.T) {
		if err := db.InsertSandbox(ctx, sandbox(team.ID, "sb-odd", base, "zombie", nil)); err == nil {
			t.Fatal("inserted a sandbox in state zombie")
		}
	})
}

func TestListSandboxes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newDB(t)
	a, b := newTeam(t, db, "acme"), newTeam(t, db, "globex")
	at := func(i int) time.Time { return base.Add(time.Duration(i) * time.Second) }
	insert(t, db,
		sandbox(a.ID, "a1", at(1), store.StateRunning, map[string]string{"env": "prod", "app": "web"}),
		sandbox(a.ID, "a2", at(2), store.StatePaused, map[string]string{"env": "prod", "app": "api"}),
		sandbox(a.ID, "a3", at(3), store.StateKilled, map[string]string{"env": "prod", "app": "web"}),
		sandbox(a.ID, "a4", at(4), store.StateRunning, map[string]string{"env": "dev"}),
		sandbox(a.ID, "a5", at(5), store.StateRunning, map[string]string{
			"a.b": "dot", `q"uote`: "1", "$.env": "prod", "[0]": "x", "sp ace": "y", "ünï": "ç",
		}),
		sandbox(a.ID, "a6", at(5), store.StateRunning, nil), // same start as a5: ordered by id
		sandbox(a.ID, "a7", at(6), store.StateRunning, map[string]string{"a": "", "b": "dot"}),
		sandbox(b.ID, "b1", at(0), store.StateRunning, map[string]string{"env": "prod", "app": "web"}),
	)

	for _, tc := range []struct {
		name string
		f    store.SandboxFilter
		want []string
	}{
		{"a team sees only its own live sandboxes by default", store.SandboxFilter{TeamID: a.ID},
			[]string{"a1", "a2", "a4", "a5", "a6", "a7"}},
		{"the other team sees only its own", store.SandboxFilter{TeamID: b.ID}, []string{"b1"}},
		{"no team filter lists every team", store.SandboxFilter{States: []store.SandboxState{store.StateRunning}},
			[]string{"b1", "a1", "a4", "a5", "a6", "a7"}},
		{"a state filter selects that state", store.SandboxFilter{TeamID: a.ID, States: []store.SandboxState{store.StateKilled}},
			[]string{"a3"}},
		{"several states select any of them", store.SandboxFilter{TeamID: a.ID,
			States: []store.SandboxState{store.StateKilled, store.StatePaused}}, []string{"a2", "a3"}},
		{"one metadata pair matches", store.SandboxFilter{TeamID: a.ID, Metadata: map[string]string{"env": "prod"}},
			[]string{"a1", "a2"}},
		{"every metadata pair must match", store.SandboxFilter{TeamID: a.ID,
			States:   []store.SandboxState{store.StateRunning, store.StatePaused, store.StateKilled},
			Metadata: map[string]string{"env": "prod", "app": "web"}}, []string{"a1", "a3"}},
		{"a key with a dot matches as itself", store.SandboxFilter{TeamID: a.ID, Metadata: map[string]string{"a.b": "dot"}},
			[]string{"a5"}},
		{"a key is matched whole, not as the tail of a dotted key", store.SandboxFilter{TeamID: a.ID, Metadata: map[string]string{"b": "dot"}},
			[]string{"a7"}},
		{"keys with quotes, brackets, JSON-path syntax and spaces match", store.SandboxFilter{TeamID: a.ID,
			Metadata: map[string]string{`q"uote`: "1", "$.env": "prod", "[0]": "x", "sp ace": "y", "ünï": "ç"}},
			[]string{"a5"}},
		{"a JSON path as key does not reach into other keys", store.SandboxFilter{TeamID: a.ID,
			Metadata: map[string]string{"$.env": "dev"}}, []string{}},
		{"a missing key matches nothing", store.SandboxFilter{TeamID: a.ID, Metadata: map[string]string{"nope": ""}},
			[]string{}},
		{"an empty value matches an empty value", store.SandboxFilter{TeamID: a.ID, Metadata: map[string]string{"a": ""}},
			[]string{"a7"}},
		{"metadata is matched within the team only", store.SandboxFilter{TeamID: b.ID,
			Metadata: map[string]string{"env": "prod", "app": "web"}}, []string{"b1"}},
		{"an unknown team lists nothing", store.SandboxFilter{TeamID: "team_nope"}, []string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.f.Order = store.OrderAsc // these cases read oldest first; TestListSandboxesOrder covers the default
			page, err := db.ListSandboxes(ctx, tc.f)
			if err != nil {
				t.Fatal(err)
			}
			if got := ids(page.Sandboxes); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("ids = %v, want %v", got, tc.want)
			}
			if page.Total != len(tc.want) || page.Next != "" {
				t.Fatalf("total = %d, next = %q; want %d, \"\"", page.Total, page.Next, len(tc.want))
			}
		})
	}

	t.Run("live sandboxes are the running and paused ones of every team", func(t *testing.T) {
		got, err := db.LiveSandboxes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"b1", "a1", "a2", "a4", "a5", "a6", "a7"}; !reflect.DeepEqual(ids(got), want) {
			t.Fatalf("LiveSandboxes = %v, want %v", ids(got), want)
		}
	})

	for _, tc := range []struct {
		name  string
		limit int
		want  int
	}{
		{"a limit of 0 means 100", 0, 6},
		{"a negative limit means 100", -5, 6},
		{"a limit over 100 is clamped", 1000, 6},
		{"a limit of 1 returns one", 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			page, err := db.ListSandboxes(ctx, store.SandboxFilter{TeamID: a.ID, Limit: tc.limit})
			if err != nil || len(page.Sandboxes) != tc.want || page.Total != 6 {
				t.Fatalf("page = %v (total %d), %v; want %d of 6", ids(page.Sandboxes), page.Total, err, tc.want)
			}
		})
	}

	for _, next := range []string{"!!!", "bm9jb2xvbg", "MTIzOg"} {
		t.Run(fmt.Sprintf("a forged next token %q is rejected", next), func(t *testing.T) {
			_, err := db.ListSandboxes(ctx, store.SandboxFilter{TeamID: a.ID, Next: next})
			if !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), "nextToken") {
				t.Fatalf("err = %v, want store.ErrInvalid naming nextToken", err)
			}
		})
	}
}

func TestListSandboxesOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newDB(t)
	a := newTeam(t, db, "acme")
	at := func(i int) time.Time { return base.Add(time.Duration(i) * time.Second) }
	s1 := sandbox(a.ID, "s1", at(1), store.StateRunning, nil)
	s2 := sandbox(a.ID, "s2", at(2), store.StateRunning, nil)
	s3 := sandbox(a.ID, "s3", at(3), store.StateRunning, nil)
	s4 := sandbox(a.ID, "s4", at(3), store.StateRunning, nil) // same start as s3: ordered by id
	s2.TemplateID, s2.Alias = "tpl_2", "web"
	s4.TemplateID = "tpl_2"
	insert(t, db, s1, s2, s3, s4)

	for _, tc := range []struct {
		name string
		f    store.SandboxFilter
		want []string
	}{
		{"the default order is newest first", store.SandboxFilter{TeamID: a.ID}, []string{"s4", "s3", "s2", "s1"}},
		{"desc is newest first", store.SandboxFilter{TeamID: a.ID, Order: store.OrderDesc}, []string{"s4", "s3", "s2", "s1"}},
		{"asc is oldest first", store.SandboxFilter{TeamID: a.ID, Order: store.OrderAsc}, []string{"s1", "s2", "s3", "s4"}},
		{"startedAfter keeps sandboxes started at or after it", store.SandboxFilter{TeamID: a.ID, StartedAfter: at(2)},
			[]string{"s4", "s3", "s2"}},
		{"template matches a template id", store.SandboxFilter{TeamID: a.ID, Template: "tpl_2", Order: store.OrderAsc},
			[]string{"s2", "s4"}},
		{"template matches an alias", store.SandboxFilter{TeamID: a.ID, Template: "web"}, []string{"s2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			page, err := db.ListSandboxes(ctx, tc.f)
			if err != nil {
				t.Fatal(err)
			}
			if got := ids(page.Sandboxes); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("ids = %v, want %v", got, tc.want)
			}
		})
	}

	for _, order := range []store.ListOrder{store.OrderAsc, store.OrderDesc} {
		t.Run("pages of one in order "+order.String()+" see each sandbox once, in order", func(t *testing.T) {
			var got []string
			next := ""
			for range 10 {
				p, err := db.ListSandboxes(ctx, store.SandboxFilter{TeamID: a.ID, Limit: 1, Order: order, Next: next})
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, ids(p.Sandboxes)...)
				if next = p.Next; next == "" {
					break
				}
			}
			want := []string{"s1", "s2", "s3", "s4"}
			if order == store.OrderDesc {
				want = []string{"s4", "s3", "s2", "s1"}
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("ids = %v, want %v", got, want)
			}
		})
	}

	t.Run("a nextToken from one order is refused in the other", func(t *testing.T) {
		p, err := db.ListSandboxes(ctx, store.SandboxFilter{TeamID: a.ID, Limit: 1, Order: store.OrderAsc})
		if err != nil || p.Next == "" {
			t.Fatalf("first page: %v, next %q", err, p.Next)
		}
		_, err = db.ListSandboxes(ctx, store.SandboxFilter{TeamID: a.ID, Limit: 1, Order: store.OrderDesc, Next: p.Next})
		if !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), "nextToken") {
			t.Fatalf("err = %v, want store.ErrInvalid naming nextToken", err)
		}
	})

	t.Run("an unknown order is refused", func(t *testing.T) {
		if _, err := db.ListSandboxes(ctx, store.SandboxFilter{TeamID: a.ID, Order: "sideways"}); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("err = %v, want store.ErrInvalid", err)
		}
	})
}

func TestListSandboxesPagination(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newDB(t)
	team, other := newTeam(t, db, "acme"), newTeam(t, db, "globex")
	// Pairs share a start time, so the order must fall back to the id.
	for i := range 250 {
		insert(t, db, sandbox(team.ID, fmt.Sprintf("sb-%03d", i), base.Add(time.Duration(i/2)*time.Second), store.StateRunning, nil))
	}
	insert(t, db, sandbox(other.ID, "other", base, store.StateRunning, nil))

	for _, tc := range []struct {
		name string
		// between runs after the page with that index has been read.
		between func(t *testing.T, page int)
		want    []int // page sizes
		total   []int // Total on each page
	}{
		{"250 sandboxes come in pages of 100, 100 and 50 with none twice", nil,
			[]int{100, 100, 50}, []int{250, 250, 250}},
		{"sandboxes created between pages are never repeated, none is skipped", func(t *testing.T, page int) {
			// One that sorts before the cursor (an offset would repeat a row), one after it.
			insert(t, db,
				sandbox(team.ID, fmt.Sprintf("early-%d", page), base.Add(-time.Hour), store.StateRunning, nil),
				sandbox(team.ID, fmt.Sprintf("late-%d", page), base.Add(time.Hour), store.StateRunning, nil))
		}, []int{100, 100, 52}, []int{250, 252, 254}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seen := map[string]bool{}
			var sizes, totals []int
			next := ""
			for page := 0; ; page++ {
				p, err := db.ListSandboxes(ctx, store.SandboxFilter{TeamID: team.ID, Limit: 100, Next: next})
				if err != nil {
					t.Fatal(err)
				}
				sizes, totals = append(sizes, len(p.Sandboxes)), append(totals, p.Total)
				for _, sb := range p.Sandboxes {
					if seen[sb.ID] {
						t.Fatalf("page %d repeats %s", page, sb.ID)
					}
					seen[sb.ID] = true
				}
				if p.Next == "" {
					break
				}
				if page > 10 {
					t.Fatal("pages never end")
				}
				next = p.Next
				if tc.between != nil {
					tc.between(t, page)
				}
			}
			if !reflect.DeepEqual(sizes, tc.want) || !reflect.DeepEqual(totals, tc.total) {
				t.Fatalf("page sizes %v totals %v, want %v %v", sizes, totals, tc.want, tc.total)
			}
			for i := range 250 {
				if id := fmt.Sprintf("sb-%03d", i); !seen[id] {
					t.Fatalf("%s skipped", id)
				}
			}
			if seen["other"] {
				t.Fatal("another team's sandbox listed")
			}
		})
	}
}

// TestConcurrentWriters writes to one file from two handles at once, in this process and
// from a child process, as cove server and the cove apikey CLI do.
func TestConcurrentWriters(t *testing.T) {
	t.Parallel()
	// Enough rows that the writers overlap for a while, a child process's start-up included.
	const perWriter = 500

	t.Run("two handles in one process both write every row", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "cove.db")
		dbs := []*DB{open(t, path), open(t, path)}
		team := newTeam(t, dbs[0], "acme")
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for w := range 4 {
			wg.Go(func() {
				if err := writeLoad(dbs[w%2], team.ID, fmt.Sprintf("w%d", w), perWriter); err != nil {
					errs <- err
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		checkCount(t, dbs[1], team.ID, 4*perWriter)
	})

	t.Run("two processes both write every row", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "cove.db")
		db := open(t, path)
		team := newTeam(t, db, "acme")
		cmd := exec.Command(os.Args[0], "-test.run=^TestWriterProcess$")
		cmd.Env = append(os.Environ(), "COVE_SQLITE_WRITER="+path, "COVE_SQLITE_TEAM="+team.ID,
			"COVE_SQLITE_N="+strconv.Itoa(perWriter))
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		err := writeLoad(db, team.ID, "parent", perWriter)
		if werr := cmd.Wait(); werr != nil {
			t.Fatalf("child: %v\n%s", werr, out.String())
		}
		if err != nil {
			t.Fatal(err)
		}
		checkCount(t, db, team.ID, 2*perWriter)
	})
}

// TestWriterProcess is the child of "two processes both write every row".
func TestWriterProcess(t *testing.T) {
	path := os.Getenv("COVE_SQLITE_WRITER")
	if path == "" {
		t.Skip("run as a child of TestConcurrentWriters")
	}
	n, _ := strconv.Atoi(os.Getenv("COVE_SQLITE_N"))
	if err := writeLoad(open(t, path), os.Getenv("COVE_SQLITE_TEAM"), "child", n); err != nil {
		t.Fatal(err)
	}
}

// writeLoad inserts and updates n sandboxes and makes and uses an API key every tenth.
func writeLoad(db *DB, teamID, prefix string, n int) error {
	ctx := context.Background()
	for i := range n {
		sb := sandbox(teamID, fmt.Sprintf("%s-%d", prefix, i), base.Add(time.Duration(i)*time.Millisecond), store.StateRunning, nil)
		if err := db.InsertSandbox(ctx, sb); err != nil {
			return err
		}
		sb.State = store.StatePaused
		if err := db.UpdateSandbox(ctx, sb); err != nil {
			return err
		}
		if i%10 == 0 {
			key, _, err := db.CreateAPIKey(ctx, teamID, prefix)
			if err != nil {
				return err
			}
			if _, _, err := db.Authenticate(ctx, key); err != nil {
				return err
			}
		}
	}
	return nil
}

func checkCount(t *testing.T, db *DB, teamID string, want int) {
	t.Helper()
	page, err := db.ListSandboxes(context.Background(), store.SandboxFilter{TeamID: teamID})
	if err != nil || page.Total != want {
		t.Fatalf("total = %v, %v; want %d", page.Total, err, want)
	}
}

func BenchmarkInsertSandbox(b *testing.B) {
	db := newDB(b)
	team := newTeam(b, db, "acme")
	md := map[string]string{"env": "prod", "app": "web"}
	ctx := context.Background()
	i := 0
	for b.Loop() {
		sb := sandbox(team.ID, "sb-"+strconv.Itoa(i), base, store.StateRunning, md)
		if err := db.InsertSandbox(ctx, sb); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

func BenchmarkAuthenticate(b *testing.B) {
	db := newDB(b)
	team := newTeam(b, db, "acme")
	ctx := context.Background()
	var key string
	for range 1000 { // a realistic table, not a one-row scan
		k, _, err := db.CreateAPIKey(ctx, team.ID, "k")
		if err != nil {
			b.Fatal(err)
		}
		key = k
	}
	for b.Loop() {
		if _, _, err := db.Authenticate(ctx, key); err != nil {
			b.Fatal(err)
		}
	}
}

func TestTheDatabaseIsReadableByItsOwnerOnly(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		pre  os.FileMode // 0: the file does not exist before Open
	}{
		{"a new database file is created 0600", 0},
		{"an existing world-readable database is narrowed to 0600", 0o644},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "cove.db")
			if tc.pre != 0 {
				if err := os.WriteFile(path, nil, tc.pre); err != nil {
					t.Fatal(err)
				}
				_ = os.Chmod(path, tc.pre)
			}
			db := open(t, path)
			newTeam(t, db, "acme") // a write, so the -wal file exists too
			for _, p := range []string{path, path + "-wal"} {
				fi, err := os.Stat(p)
				if err != nil {
					t.Fatal(err)
				}
				if m := fi.Mode().Perm(); m != 0o600 {
					t.Errorf("%s has mode %o, want 600", filepath.Base(p), m)
				}
			}
		})
	}
}
