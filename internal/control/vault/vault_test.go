package vault_test

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/cove-dev/cove/internal/control/vault"
)

func TestVault(t *testing.T) {
	secret := "planted-secret-7777777777"
	t.Run("a set put is got back by a vault opened again on the same dir, and is not in the clear on disk", func(t *testing.T) {
		dir := t.TempDir()
		v, err := vault.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := v.Put("isbx1", []string{secret, "other-value"}); err != nil {
			t.Fatal(err)
		}
		again, err := vault.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		got, err := again.Get("isbx1")
		if err != nil || !slices.Equal(got, []string{secret, "other-value"}) {
			t.Fatalf("get after reopening: %q %v", got, err)
		}
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
			if bytes.Contains(b, []byte(secret)) {
				t.Errorf("%s holds the secret in the clear", e.Name())
			}
			if fi, _ := e.Info(); fi.Mode().Perm() != 0o600 {
				t.Errorf("%s has mode %v, want 0600", e.Name(), fi.Mode().Perm())
			}
		}
		if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o700 {
			t.Errorf("the vault dir has mode %v, want 0700", fi.Mode().Perm())
		}
		if names, _ := again.Names(); !slices.Equal(names, []string{"isbx1"}) {
			t.Errorf("names %v, want [isbx1] (the key is not a set)", names)
		}
	})
	t.Run("a missing set is nil, a deleted one is gone, and deleting twice is fine", func(t *testing.T) {
		v, err := vault.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		if got, err := v.Get("none"); got != nil || err != nil {
			t.Errorf("get of a missing set: %q %v", got, err)
		}
		_ = v.Put("a", []string{secret})
		for range 2 {
			if err := v.Delete("a"); err != nil {
				t.Errorf("delete: %v", err)
			}
		}
		if got, _ := v.Get("a"); got != nil {
			t.Errorf("a deleted set reads %q", got)
		}
	})
	t.Run("a set renamed to another name or sealed under another key does not open", func(t *testing.T) {
		dir := t.TempDir()
		v, _ := vault.Open(dir)
		_ = v.Put("a", []string{secret})
		if err := os.Rename(filepath.Join(dir, "a"), filepath.Join(dir, "b")); err != nil {
			t.Fatal(err)
		}
		if got, err := v.Get("b"); err == nil {
			t.Errorf("a set renamed from a to b opened: %q", got)
		}
		otherDir := t.TempDir()
		other, _ := vault.Open(otherDir)
		b, _ := os.ReadFile(filepath.Join(dir, "b"))
		if err := os.WriteFile(filepath.Join(otherDir, "a"), b, 0o600); err != nil {
			t.Fatal(err)
		}
		if got, err := other.Get("a"); err == nil {
			t.Errorf("a set sealed under another vault's key opened: %q", got)
		}
	})
	t.Run("bad names are refused", func(t *testing.T) {
		v, _ := vault.Open(t.TempDir())
		for _, name := range []string{"", "../x", ".key", "a/b"} {
			if err := v.Put(name, []string{secret}); err == nil {
				t.Errorf("put %q: no error", name)
			}
		}
	})
}

// TestOpenKeyed: vaults opened with one given key (a cluster's nodes) open what each other
// sealed, keep no key file of their own, and a dir with a key of its own is refused.
func TestOpenKeyed(t *testing.T) {
	key := bytes.Repeat([]byte{7}, 32)
	a, err := vault.OpenKeyed(t.TempDir(), key)
	if err != nil {
		t.Fatal(err)
	}
	bDir := t.TempDir()
	b, err := vault.OpenKeyed(bDir, key)
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := a.Seal("token-x", []byte("hunter2"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := b.Unseal("token-x", sealed); err != nil || string(got) != "hunter2" {
		t.Fatalf("another node's vault: %q %v", got, err)
	}
	if _, err := os.Stat(filepath.Join(bDir, ".key")); !os.IsNotExist(err) {
		t.Errorf("a keyed vault wrote a key file: %v", err)
	}
	own := t.TempDir()
	if _, err := vault.Open(own); err != nil {
		t.Fatal(err)
	}
	if _, err := vault.OpenKeyed(own, key); err == nil {
		t.Error("a dir with a key of its own opened with another key")
	}
	if _, err := vault.OpenKeyed(t.TempDir(), key[:16]); err == nil {
		t.Error("a 16-byte key was taken")
	}
}
