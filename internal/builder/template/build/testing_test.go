package build

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/cove-dev/cove/internal/builder/template"
	"github.com/cove-dev/cove/internal/sandbox/runtime"
	"github.com/cove-dev/cove/internal/store/sqlite"
)

// openData opens the template store of the data dir data as a server does, its records in
// the data dir's SQLite file (a real one, opened again by each call as by each start), and
// its builder, whose RUN steps run in rt.
func openData(tb testing.TB, data string, rt runtime.Runtime) (*Builder, error) {
	tb.Helper()
	return openDir(tb, filepath.Join(data, "templates"), rt)
}

// openDir opens the template store in dir, its records in the SQLite file beside dir, and
// its builder.
func openDir(tb testing.TB, dir string, rt runtime.Runtime) (*Builder, error) {
	tb.Helper()
	ts, err := template.OpenAt(context.Background(), dir, testRecords(tb, filepath.Dir(dir)))
	if err != nil {
		return nil, err
	}
	return New(ts, rt), nil
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
