package secrets_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cove-dev/cove/internal/secrets"
)

func TestStore(t *testing.T) {
	path := filepath.Join(t.TempDir(), "secrets.json")
	s, err := secrets.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Create("team-a", "OpenAI-Key", "v1-value", map[string]string{"env": "prod"})
	if err != nil {
		t.Fatal(err)
	}
	t.Run("names are lower-cased and ids start with sec_", func(t *testing.T) {
		if info.Name != "openai-key" || !strings.HasPrefix(info.ID, "sec_") || info.CurrentVersion != 1 {
			t.Fatalf("%+v", info)
		}
	})
	t.Run("no read returns the value", func(t *testing.T) {
		got, _ := s.Get("team-a", info.ID)
		list, _ := s.List("team-a", 10, "")
		b, _ := json.Marshal([]any{got, list})
		if strings.Contains(string(b), "v1-value") {
			t.Fatalf("a read holds the value: %s", b)
		}
	})
	t.Run("a second secret of the same name is a conflict, in the same team only", func(t *testing.T) {
		if _, err := s.Create("team-a", "openai-key", "x", nil); !errors.Is(err, secrets.ErrConflict) {
			t.Fatalf("same team: %v", err)
		}
		if _, err := s.Create("team-b", "openai-key", "x", nil); err != nil {
			t.Fatalf("other team: %v", err)
		}
	})
	t.Run("bad input is ErrInvalid", func(t *testing.T) {
		for _, tc := range []struct{ name, value string }{{"sec_reserved", "x"}, {"", "x"}, {"has space", "x"}, {"ok", ""}} {
			if _, err := s.Create("team-a", tc.name, tc.value, nil); !errors.Is(err, secrets.ErrInvalid) {
				t.Errorf("%q=%q: %v", tc.name, tc.value, err)
			}
		}
	})
	t.Run("an update adds a version that Value serves, and survives a reopen", func(t *testing.T) {
		up, err := s.Update("team-a", "openai-key", "v2-value", nil)
		if err != nil || up.CurrentVersion != 2 {
			t.Fatalf("%+v %v", up, err)
		}
		again, err := secrets.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		if v, ok := again.Value("team-a", "openai-key"); !ok || v != "v2-value" {
			t.Fatalf("value after reopen: %q %v", v, ok)
		}
		if _, ok := again.Value("team-c", "openai-key"); ok {
			t.Fatal("another team reads the secret")
		}
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("store file mode: %v %v", fi.Mode(), err)
		}
	})
	t.Run("delete removes it; a second delete is not found", func(t *testing.T) {
		if err := s.Delete("team-a", info.ID); err != nil {
			t.Fatal(err)
		}
		if err := s.Delete("team-a", info.ID); !errors.Is(err, secrets.ErrNotFound) {
			t.Fatalf("second delete: %v", err)
		}
	})
}
