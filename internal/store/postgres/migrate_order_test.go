package postgres_test

import (
	"context"
	"testing"

	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/store/postgres"
	"github.com/cove-dev/cove/internal/store/postgres/pgtest"
)

// TestAMigrationNumberedBelowTheAppliedOnesIsApplied: a database that has a later migration
// but not an earlier one (branches merged in another order than they were numbered) gets
// the earlier one at the next Open, as SQLite's migrator does, instead of refusing to start.
func TestAMigrationNumberedBelowTheAppliedOnesIsApplied(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.Shared(t).NewDatabase(t)
	db, err := postgres.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	// As if 00012 (template builds) had landed after every later migration was applied.
	if _, err := db.Pool().Exec(ctx, `DROP TABLE template_build_logs; DROP TABLE template_builds;
		DELETE FROM goose_db_version WHERE version_id = 12`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	db, err = postgres.Open(ctx, dsn)
	if err != nil {
		t.Fatalf("open with a migration missing below the applied ones: %v", err)
	}
	defer db.Close()
	if err := db.PutTemplateBuild(ctx, &store.TemplateBuild{ID: "b1", Template: "web", Status: "waiting", Record: []byte(`{}`)}); err != nil {
		t.Fatalf("the missing migration's table: %v", err)
	}
}
