package vault_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/cove-dev/cove/internal/control/vault"
	"github.com/cove-dev/cove/internal/store/sqlite"
)

func TestVaultKeptInTheStore(t *testing.T) {
	ctx := context.Background()
	secret := "planted-secret-8888888888"
	t.Run("the sets of a release that kept files move into the store, sealed, and are found there", func(t *testing.T) {
		dir, dbPath := t.TempDir(), filepath.Join(t.TempDir(), "cove.db")
		old, err := vault.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		for name, values := range map[string][]string{"isbx1": {secret}, "isbx2": {"two"}} {
			if err := old.Put(name, values); err != nil {
				t.Fatal(err)
			}
		}
		db, err := sqlite.Open(ctx, dbPath)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		v, err := vault.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := v.KeepIn(ctx, db, ""); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"isbx1", "isbx2"} {
			if _, err := os.Stat(filepath.Join(dir, name)); !os.IsNotExist(err) {
				t.Errorf("the file of %s is still there: %v", name, err)
			}
		}
		if got, err := v.Get("isbx1"); err != nil || !slices.Equal(got, []string{secret}) {
			t.Fatalf("isbx1 from the store: %q %v", got, err)
		}
		if names, err := v.Names(); err != nil || !slices.Equal(names, []string{"isbx1", "isbx2"}) {
			t.Errorf("names %v %v", names, err)
		}
		if err := v.Put("isbx3", []string{secret}); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(dir, "isbx3")); !os.IsNotExist(err) {
			t.Errorf("a set put after KeepIn went to a file: %v", err)
		}
		if err := v.Delete("isbx2"); err != nil {
			t.Fatal(err)
		}
		if got, err := v.Get("isbx2"); err != nil || got != nil {
			t.Errorf("a deleted set: %q %v", got, err)
		}
		for _, f := range []string{dbPath, dbPath + "-wal"} {
			if b, _ := os.ReadFile(f); bytes.Contains(b, []byte(secret)) {
				t.Errorf("%s holds the secret in the clear", f)
			}
		}
	})
	t.Run("a file left by a crash after its set was kept is kept again and removed", func(t *testing.T) {
		dir := t.TempDir()
		db, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "cove.db"))
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		files, _ := vault.Open(dir)
		if err := files.Put("isbx1", []string{"v1"}); err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(filepath.Join(dir, "isbx1"))
		first, _ := vault.Open(dir)
		if err := first.KeepIn(ctx, db, ""); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "isbx1"), b, 0o600); err != nil { // the crash's leftover
			t.Fatal(err)
		}
		again, _ := vault.Open(dir)
		if err := again.KeepIn(ctx, db, ""); err != nil {
			t.Fatal(err)
		}
		if got, err := again.Get("isbx1"); err != nil || !slices.Equal(got, []string{"v1"}) {
			t.Errorf("after the second start: %q %v", got, err)
		}
		if _, err := os.Stat(filepath.Join(dir, "isbx1")); !os.IsNotExist(err) {
			t.Errorf("the leftover file stays: %v", err)
		}
	})
	t.Run("two nodes with the cluster's key read each other's sets and each lists its own", func(t *testing.T) {
		db, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "cove.db"))
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		key := bytes.Repeat([]byte{7}, 32)
		a, _ := vault.OpenKeyed(t.TempDir(), key)
		b, _ := vault.OpenKeyed(t.TempDir(), key)
		if err := a.KeepIn(ctx, db, "node-a"); err != nil {
			t.Fatal(err)
		}
		if err := b.KeepIn(ctx, db, "node-b"); err != nil {
			t.Fatal(err)
		}
		if err := a.Put("isbx1", []string{secret}); err != nil {
			t.Fatal(err)
		}
		if got, err := b.Get("isbx1"); err != nil || !slices.Equal(got, []string{secret}) {
			t.Fatalf("node-b reads node-a's set: %q %v", got, err)
		}
		if names, _ := b.Names(); len(names) != 0 {
			t.Errorf("node-b lists %v, none of its own", names)
		}
		if err := b.Put("isbx1", []string{secret}); err != nil { // the sandbox moved to node-b
			t.Fatal(err)
		}
		if names, _ := a.Names(); len(names) != 0 {
			t.Errorf("after the move node-a still lists %v (its prune would delete node-b's)", names)
		}
		if err := a.Delete("isbx1"); err != nil { // node-a ends its old copy
			t.Fatal(err)
		}
		if got, err := b.Get("isbx1"); err != nil || !slices.Equal(got, []string{secret}) {
			t.Errorf("node-a's end of its copy took node-b's set: %q %v", got, err)
		}
	})
}
