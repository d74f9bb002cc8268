package sqlite

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cove-dev/cove/internal/control/vault"
	"github.com/cove-dev/cove/internal/store"
)

// TestSecretsKeptSealed: envd tokens and webhook secrets are sealed in the database when it
// has the vault; rows an older release wrote in the clear are sealed at the next Open; a
// store opened without the vault says so rather than hand out a sealed value.
func TestSecretsKeptSealed(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "cove.db")
	v, err := vault.Open(filepath.Join(dir, "vault"))
	if err != nil {
		t.Fatal(err)
	}
	const oldToken, oldSecret = "ea-token-written-in-the-clear-1", "whsec-written-in-the-clear-1"
	const newToken, newSecret = "ea-token-written-sealed-2", "whsec-written-sealed-2"

	// An older release: no vault.
	old, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	team, err := old.CreateTeam(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	sb := sandbox(team.ID, "sb-old", base, store.StateRunning, nil)
	sb.EnvdAccessToken = oldToken
	insert(t, old, sb)
	if err := old.InsertWebhook(ctx, &store.Webhook{ID: "wh-old", TeamID: team.ID, Name: "n", URL: "http://198.18.0.1/h",
		Events: []string{"sandbox.lifecycle.killed"}, Secret: oldSecret, CreatedAt: base}); err != nil {
		t.Fatal(err)
	}
	old.Close()

	db, err := Open(ctx, path, WithSealer(v))
	if err != nil {
		t.Fatal(err)
	}
	sb2 := sandbox(team.ID, "sb-new", base, store.StateRunning, nil)
	sb2.EnvdAccessToken = newToken
	insert(t, db, sb2)
	if err := db.InsertWebhook(ctx, &store.Webhook{ID: "wh-new", TeamID: team.ID, Name: "n", URL: "http://198.18.0.1/h",
		Events: []string{"sandbox.lifecycle.killed"}, Secret: newSecret, CreatedAt: base}); err != nil {
		t.Fatal(err)
	}
	t.Run("every value reads back as it was given", func(t *testing.T) {
		for id, want := range map[string]string{"sb-old": oldToken, "sb-new": newToken} {
			got, err := db.GetSandbox(ctx, id)
			if err != nil || got.EnvdAccessToken != want {
				t.Errorf("%s: token %q, %v", id, got.EnvdAccessToken, err)
			}
		}
		live, err := db.LiveSandboxes(ctx)
		if err != nil || len(live) != 2 {
			t.Fatalf("live %d, %v", len(live), err)
		}
		for id, want := range map[string]string{"wh-old": oldSecret, "wh-new": newSecret} {
			w, err := db.GetWebhook(ctx, team.ID, id)
			if err != nil || w.Secret != want {
				t.Errorf("%s: secret %q, %v", id, w.Secret, err)
			}
		}
	})
	t.Run("the columns hold sealed values only", func(t *testing.T) {
		var n int
		if err := db.read.QueryRow(`SELECT count(*) FROM sandboxes WHERE envd_access_token NOT LIKE 'sealed:v1:%'`).Scan(&n); err != nil || n != 0 {
			t.Fatalf("%d tokens in the clear, %v", n, err)
		}
		if err := db.read.QueryRow(`SELECT count(*) FROM webhooks WHERE secret NOT LIKE 'sealed:v1:%'`).Scan(&n); err != nil || n != 0 {
			t.Fatalf("%d webhook secrets in the clear, %v", n, err)
		}
	})
	t.Run("a sealed token copied to another sandbox does not open", func(t *testing.T) {
		if _, err := db.write.Exec(`UPDATE sandboxes SET envd_access_token = (SELECT envd_access_token FROM sandboxes WHERE id = 'sb-new') WHERE id = 'sb-old'`); err != nil {
			t.Fatal(err)
		}
		if _, err := db.GetSandbox(ctx, "sb-old"); err == nil {
			t.Fatal("a token moved to another row opened")
		}
	})
	db.Close()
	t.Run("no file of the store holds a value in the clear after a checkpoint", func(t *testing.T) {
		// The WAL of the first Open may still hold the old clear rows until SQLite checkpoints
		// it; Close checkpoints, and the pages were rewritten sealed.
		files, _ := filepath.Glob(filepath.Join(dir, "cove.db*"))
		for _, f := range files {
			b, _ := os.ReadFile(f)
			for _, s := range []string{newToken, newSecret, oldToken, oldSecret} {
				if bytes.Contains(b, []byte(s)) {
					t.Errorf("%s holds %s", f, s)
				}
			}
		}
	})
	t.Run("without the vault, a sealed value is an error naming it, never the sealed text", func(t *testing.T) {
		bare, err := Open(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		defer bare.Close()
		if _, err := bare.GetSandbox(ctx, "sb-new"); err == nil || !strings.Contains(err.Error(), "without the vault") {
			t.Fatalf("get without the vault: %v", err)
		}
	})
}
