package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/cove-dev/cove/internal/control/vault"
	"github.com/cove-dev/cove/internal/store/sqlite"
	"github.com/cove-dev/cove/internal/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, sealed bool) storetest.Engine {
		dir := t.TempDir()
		var opts []sqlite.Option
		if sealed {
			v, err := vault.Open(filepath.Join(dir, "vault"))
			if err != nil {
				t.Fatal(err)
			}
			opts = append(opts, sqlite.WithSealer(v))
		}
		db, err := sqlite.Open(context.Background(), filepath.Join(dir, "cove.db"), opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	})
}
