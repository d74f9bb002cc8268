package orchestrator

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	"github.com/cove-dev/cove/internal/control/vault"
	"github.com/cove-dev/cove/sdk/reason"
)

func TestASandboxsSecretsAreKeptWhileItLives(t *testing.T) {
	v, err := vault.Open(filepath.Join(t.TempDir(), "vault"))
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, func(c *Config) { c.Vault = v })
	const envSecret, mdSecret, keySecret = "env-secret-kept-111111", "md-secret-kept-222222", "e2b_caller_key_kept_333"
	sb := h.create(CreateRequest{TeamID: h.team, EnvVars: map[string]string{"DB_PASSWORD": envSecret, "GREETING": "hello-there"},
		Metadata: map[string]string{"apiToken": mdSecret}, Secrets: []string{keySecret}})
	t.Run("the create keeps its secret env, metadata and the caller's key, not its plain env", func(t *testing.T) {
		kept, err := v.Get(sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{envSecret, mdSecret, keySecret} {
			if !slices.Contains(kept, want) {
				t.Errorf("kept %q lacks %q", kept, want)
			}
		}
		if slices.Contains(kept, "hello-there") {
			t.Errorf("kept %q holds a plain env value", kept)
		}
	})
	t.Run("a secret the sandbox learns later is kept at once", func(t *testing.T) {
		h.o.mu.Lock()
		e := h.o.live[sb.ID]
		h.o.mu.Unlock()
		e.collector.AddSecret("learned-secret-444444")
		if kept, _ := v.Get(sb.ID); !slices.Contains(kept, "learned-secret-444444") {
			t.Errorf("kept %q lacks the learned secret", kept)
		}
	})
	t.Run("a restart prunes sets of no live sandbox and keeps the live ones'", func(t *testing.T) {
		if err := v.Put("igone0000000000000000", []string{"stale-secret-555555"}); err != nil {
			t.Fatal(err)
		}
		h.o.pruneSecrets(context.Background())
		if names, _ := v.Names(); !slices.Equal(names, []string{sb.ID}) {
			t.Errorf("after the prune: %v, want only %s", names, sb.ID)
		}
	})
	t.Run("the kill removes them", func(t *testing.T) {
		if err := h.o.Kill(context.Background(), h.team, sb.ID, reason.KillRequest, ""); err != nil {
			t.Fatal(err)
		}
		if names, _ := v.Names(); len(names) != 0 {
			t.Errorf("after the kill the vault holds %v", names)
		}
	})
}
