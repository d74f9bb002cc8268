package template

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/cove-dev/cove/internal/store/sqlite"
)

// openData opens the template store of the data dir data as a server does: its records in
// the data dir's SQLite file (a real one, opened again by each call as by each start).
func openData(tb testing.TB, data string) (*Store, error) {
	tb.Helper()
	return OpenAt(context.Background(), filepath.Join(data, "templates"), testRecords(tb, data))
}

// openDir opens the template store in dir, its records in the SQLite file beside dir.
func openDir(tb testing.TB, dir string) (*Store, error) {
	tb.Helper()
	return OpenAt(context.Background(), dir, testRecords(tb, filepath.Dir(dir)))
}

// testRecords opens data/cove.db, closed when the test ends.
func testRecords(tb testing.TB, data string) *sqlite.DB {
	tb.Helper()
	if err := os.MkdirAll(data, 0o700); err != nil {
		tb.Fatal(err)
	}
	db, err := sqlite.Open(context.Background(), filepath.Join(data, "cove.db"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}
