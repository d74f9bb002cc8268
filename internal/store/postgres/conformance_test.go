package postgres_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cove-dev/cove/internal/control/vault"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/store/postgres"
	"github.com/cove-dev/cove/internal/store/postgres/pgtest"
	"github.com/cove-dev/cove/internal/store/storetest"
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

// TestEventsLiveInDayPartitions: events are kept in one partition per UTC day, made as the
// days come, and a day is dropped whole.
func TestEventsLiveInDayPartitions(t *testing.T) {
	ctx := context.Background()
	db := open(t, false)
	day := time.Date(2026, 12, 1, 23, 59, 0, 0, time.UTC)
	for i, at := range []time.Time{day, day.Add(2 * time.Minute), day.Add(25 * time.Hour)} {
		if _, err := db.InsertEvent(ctx, &store.Event{ID: fmt.Sprintf("ev%d", i), Type: "sandbox.lifecycle.created", Timestamp: at, TeamID: "team"}); err != nil {
			t.Fatal(err)
		}
	}
	parts := func() []string {
		rows, err := db.Pool().Query(ctx, `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
			JOIN pg_class p ON p.oid = i.inhparent WHERE p.relname = 'events' ORDER BY 1`)
		if err != nil {
			t.Fatal(err)
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return names
	}
	if got := parts(); !reflect.DeepEqual(got, []string{"events_20261201", "events_20261202", "events_20261203"}) {
		t.Fatalf("partitions %v", got)
	}
	n, err := postgres.DropEventDaysBefore(ctx, db, time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC))
	if err != nil || n != 1 {
		t.Fatalf("dropped %d rows, %v", n, err)
	}
	if got := parts(); !reflect.DeepEqual(got, []string{"events_20261202", "events_20261203"}) {
		t.Fatalf("partitions after the drop %v", got)
	}
	page, err := db.ListEvents(ctx, store.EventFilter{TeamID: "team"})
	if err != nil || len(page.Events) != 2 || page.Events[0].ID != "ev1" {
		t.Fatalf("events after the drop: %+v %v", page, err)
	}
}
