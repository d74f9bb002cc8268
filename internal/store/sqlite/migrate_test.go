package sqlite

import (
	"context"
	"path/filepath"
	"testing"
)

func TestAMigrationNumberedBelowTheHighestAppliedIsStillApplied(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "cove.db")
	db := open(t, path)
	ctx := context.Background()
	// As if 0002 had landed after a later migration was applied: its tables and its record gone.
	for _, q := range []string{
		`DROP TABLE webhook_attempts`, `DROP TABLE webhook_deliveries`, `DROP TABLE webhooks`, `DROP TABLE events`,
		`DELETE FROM schema_migrations WHERE version = 2`,
	} {
		if _, err := db.write.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()
	db = open(t, path)
	var n int
	if err := db.read.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE name = 'events'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("events table after reopening: %d, %v; want migration 0002 applied again", n, err)
	}
}
