package secrets_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/control/secrets"
	"github.com/cove-dev/cove/internal/control/vault"
	"github.com/cove-dev/cove/internal/store/sqlite"
)

// open returns a secret store over a real SQLite file and vault in dir.
func open(t *testing.T, dir, legacy string) *secrets.Store {
	t.Helper()
	ctx := context.Background()
	db, err := sqlite.Open(ctx, filepath.Join(dir, "cove.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	v, err := vault.Open(filepath.Join(dir, "vault"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := secrets.Open(ctx, db, v, legacy)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// filesHold reports whether any file under dir holds needle (the database, its WAL, the vault).
func filesHold(t *testing.T, dir, needle string) []string {
	t.Helper()
	var found []string
	_ = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if b, err := os.ReadFile(path); err == nil && bytes.Contains(b, []byte(needle)) {
			found = append(found, path)
		}
		return nil
	})
	return found
}

func TestStore(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := open(t, dir, "")
	info, err := s.Create(ctx, "team-a", "OpenAI-Key", "v1-value-planted", map[string]string{"env": "prod"})
	if err != nil {
		t.Fatal(err)
	}
	t.Run("names are lower-cased and ids start with sec_", func(t *testing.T) {
		if info.Name != "openai-key" || !strings.HasPrefix(info.ID, "sec_") || info.CurrentVersion != 1 {
			t.Fatalf("%+v", info)
		}
	})
	t.Run("no read returns the value", func(t *testing.T) {
		got, _ := s.Get(ctx, "team-a", info.ID)
		list, _, _ := s.List(ctx, "team-a", 10, "")
		b, _ := json.Marshal([]any{got, list})
		if strings.Contains(string(b), "v1-value") {
			t.Fatalf("a read holds the value: %s", b)
		}
		if got.Metadata["env"] != "prod" || len(list) != 1 {
			t.Fatalf("get %+v list %+v", got, list)
		}
	})
	t.Run("a second secret of the same name is a conflict, in the same team only", func(t *testing.T) {
		if _, err := s.Create(ctx, "team-a", "openai-key", "x", nil); !errors.Is(err, secrets.ErrConflict) {
			t.Fatalf("same team: %v", err)
		}
		if _, err := s.Create(ctx, "team-b", "openai-key", "x", nil); err != nil {
			t.Fatalf("other team: %v", err)
		}
	})
	t.Run("bad input is ErrInvalid", func(t *testing.T) {
		for _, tc := range []struct{ name, value string }{{"sec_reserved", "x"}, {"", "x"}, {"has space", "x"}, {"ok", ""}} {
			if _, err := s.Create(ctx, "team-a", tc.name, tc.value, nil); !errors.Is(err, secrets.ErrInvalid) {
				t.Errorf("%q=%q: %v", tc.name, tc.value, err)
			}
		}
	})
	t.Run("an update adds a version that Value serves, and survives a reopen", func(t *testing.T) {
		up, err := s.Update(ctx, "team-a", "OpenAI-Key", "v2-value-planted", nil)
		if err != nil || up.CurrentVersion != 2 || up.Metadata["env"] != "prod" {
			t.Fatalf("%+v %v", up, err)
		}
		again := open(t, dir, "")
		if v, ok := again.Value("team-a", "openai-key"); !ok || v != "v2-value-planted" {
			t.Fatalf("value after reopen: %q %v", v, ok)
		}
		if _, ok := again.Value("team-c", "openai-key"); ok {
			t.Fatal("another team reads the secret")
		}
	})
	t.Run("no file of the data dir holds a value in the clear", func(t *testing.T) {
		for _, v := range []string{"v1-value-planted", "v2-value-planted"} {
			if files := filesHold(t, dir, v); len(files) > 0 {
				t.Errorf("%s in the clear in %v", v, files)
			}
		}
	})
	t.Run("pages follow names", func(t *testing.T) {
		for _, n := range []string{"b", "c", "d"} {
			if _, err := s.Create(ctx, "team-p", n, "x", nil); err != nil {
				t.Fatal(err)
			}
		}
		first, next, err := s.List(ctx, "team-p", 2, "")
		if err != nil || len(first) != 2 || next != "c" {
			t.Fatalf("first page %+v next %q %v", first, next, err)
		}
		rest, next, err := s.List(ctx, "team-p", 2, next)
		if err != nil || len(rest) != 1 || rest[0].Name != "d" || next != "" {
			t.Fatalf("second page %+v next %q %v", rest, next, err)
		}
	})
	t.Run("delete removes it; a second delete is not found", func(t *testing.T) {
		if err := s.Delete(ctx, "team-a", info.ID); err != nil {
			t.Fatal(err)
		}
		if err := s.Delete(ctx, "team-a", info.ID); !errors.Is(err, secrets.ErrNotFound) {
			t.Fatalf("second delete: %v", err)
		}
		if _, ok := s.Value("team-a", "openai-key"); ok {
			t.Fatal("a deleted secret still has a value")
		}
	})
}

// TestOlderSecretsFileMovesIntoTheStore starts from a secrets.json as the release before this
// one wrote it (values in the clear, every version kept) and checks that the first start moves
// every secret into the store, sealed, removes the file, and that a second start (or one after
// a crash that left the file) neither duplicates nor loses anything.
func TestOlderSecretsFileMovesIntoTheStore(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	legacy := filepath.Join(dir, "secrets.json")
	old := `[{"secretID":"sec_0a1b2c3d4e5f60718293","name":"deploy-token","currentVersion":2,"metadata":{"env":"ci"},
	"createdAt":"2026-12-01T10:00:00Z","updatedAt":"2026-12-02T10:00:00Z","team":"team_1","versions":["old-planted-1","old-planted-2"]},
	{"secretID":"sec_ffeeddccbbaa99887766","name":"other","currentVersion":1,"metadata":{},
	"createdAt":"2026-12-01T10:00:00Z","updatedAt":"2026-12-01T10:00:00Z","team":"team_2","versions":["old-planted-3"]}]`
	if err := os.WriteFile(legacy, []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	keep, _ := os.ReadFile(legacy)
	s := open(t, dir, legacy)
	check := func(t *testing.T, s *secrets.Store) {
		t.Helper()
		info, err := s.Get(ctx, "team_1", "sec_0a1b2c3d4e5f60718293")
		if err != nil || info.Name != "deploy-token" || info.CurrentVersion != 2 || info.Metadata["env"] != "ci" ||
			!info.CreatedAt.Equal(mustTime("2026-12-01T10:00:00Z")) {
			t.Fatalf("moved secret: %+v %v", info, err)
		}
		if v, ok := s.Value("team_1", "deploy-token"); !ok || v != "old-planted-2" {
			t.Fatalf("moved value: %q %v", v, ok)
		}
		if v, ok := s.Value("team_2", "other"); !ok || v != "old-planted-3" {
			t.Fatalf("second team's value: %q %v", v, ok)
		}
		if list, _, _ := s.List(ctx, "team_1", 0, ""); len(list) != 1 {
			t.Fatalf("team_1 has %d secrets", len(list))
		}
	}
	t.Run("every secret and version is moved and the file removed", func(t *testing.T) {
		check(t, s)
		if _, err := os.Stat(legacy); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("secrets.json is still there: %v", err)
		}
		for _, v := range []string{"old-planted-1", "old-planted-2", "old-planted-3"} {
			if files := filesHold(t, dir, v); len(files) > 0 {
				t.Errorf("%s in the clear in %v", v, files)
			}
		}
	})
	t.Run("a file left by a crash after the move is moved again without a duplicate", func(t *testing.T) {
		if err := os.WriteFile(legacy, keep, 0o600); err != nil {
			t.Fatal(err)
		}
		check(t, open(t, dir, legacy))
	})
}

func mustTime(s string) time.Time {
	t, _ := time.Parse(time.RFC3339, s)
	return t
}
