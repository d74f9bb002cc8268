package postgres_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cove-dev/cove/internal/store/postgres"
	"github.com/cove-dev/cove/internal/store/postgres/pgtest"
	"github.com/cove-dev/cove/internal/store/storetest"
	"github.com/cove-dev/cove/internal/vault"
)

func TestMain(m *testing.M) {
	code := m.Run()
	pgtest.StopShared()
	os.Exit(code)
}

func open(t *testing.T, sealed bool) *postgres.DB {
	t.Helper()
	srv := pgtest.Shared(t)
	var opts []postgres.Option
	if sealed {
		v, err := vault.Open(filepath.Join(t.TempDir(), "vault"))
		if err != nil {
			t.Fatal(err)
		}
		opts = append(opts, postgres.WithSealer(v))
	}
	db, err := postgres.Open(context.Background(), srv.NewDatabase(t), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, sealed bool) storetest.Engine { return open(t, sealed) })
}

// TestNodesStartingTogetherMigrateOnce opens one database from several goroutines at once, as
// cluster nodes starting together do: goose's advisory lock lets one migrate, and every Open
// succeeds on the same schema.
func TestNodesStartingTogetherMigrateOnce(t *testing.T) {
	srv := pgtest.Shared(t)
	dsn := srv.NewDatabase(t)
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			db, err := postgres.Open(context.Background(), dsn)
			if err == nil {
				_, err = db.CreateTeam(context.Background(), "node")
				db.Close()
			}
			errs <- err
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

func TestOpenNamesABadState(t *testing.T) {
	_, err := postgres.Open(context.Background(), "postgres://user:hunter2@[bad")
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("open of a malformed address: %v", err)
	}
}
