package sqlite

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/store"
)

func TestConsoleSessions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "cove.db")
	db := open(t, path)
	team := newTeam(t, db, "a")
	_, key, err := db.CreateAPIKey(ctx, team.ID, "k")
	if err != nil {
		t.Fatal(err)
	}
	sess := func(hash, teamID, keyID string, expires time.Time) *store.ConsoleSession {
		return &store.ConsoleSession{TokenHash: hash, TeamID: teamID, TeamName: "a", KeyID: keyID, CSRF: "c-" + hash, CreatedAt: base, Expires: expires}
	}
	for _, s := range []*store.ConsoleSession{
		sess("team", team.ID, key.ID, base.Add(time.Hour)),
		{TokenHash: "admin", KeyID: "admin", CSRF: "c-admin", AdminHash: "h", CreatedAt: base, Expires: base.Add(time.Hour)},
		sess("old", team.ID, key.ID, base.Add(-time.Minute)),
		sess("forged", team.ID, "key_of_nobody", base.Add(time.Hour)),
	} {
		if err := db.InsertConsoleSession(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	live := func(hash string) bool {
		t.Helper()
		_, err := db.GetConsoleSession(ctx, hash, base)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			t.Fatal(err)
		}
		return err == nil
	}
	t.Run("a session comes back as it went in", func(t *testing.T) {
		got, err := db.GetConsoleSession(ctx, "team", base)
		if err != nil || *got != *sess("team", team.ID, key.ID, base.Add(time.Hour)) {
			t.Fatalf("got %+v, %v", got, err)
		}
	})
	t.Run("expired sessions and sessions of unknown keys are not live", func(t *testing.T) {
		if !live("admin") || live("old") || live("forged") || live("nobody") {
			t.Errorf("admin %v old %v forged %v nobody %v", live("admin"), live("old"), live("forged"), live("nobody"))
		}
	})
	t.Run("sessions survive reopening the database", func(t *testing.T) {
		again := open(t, path)
		if _, err := again.GetConsoleSession(ctx, "team", base); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("revoking the key ends its sessions", func(t *testing.T) {
		if err := db.RevokeAPIKey(ctx, team.ID, key.ID); err != nil {
			t.Fatal(err)
		}
		if live("team") || !live("admin") {
			t.Errorf("team %v admin %v", live("team"), live("admin"))
		}
	})
	t.Run("delete, delete by key and prune remove rows", func(t *testing.T) {
		if err := db.DeleteConsoleSession(ctx, "admin"); err != nil || live("admin") {
			t.Fatalf("admin still live: %v", err)
		}
		if err := db.PruneConsoleSessions(ctx, base); err != nil {
			t.Fatal(err)
		}
		if err := db.DeleteConsoleSessionsOfKey(ctx, key.ID); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := db.read.QueryRowContext(ctx, `SELECT count(*) FROM console_sessions`).Scan(&n); err != nil || n != 1 {
			t.Errorf("%d rows left, want 1 (the forged one), %v", n, err)
		}
	})
}
