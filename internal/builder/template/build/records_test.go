package build_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/cove-dev/cove/internal/builder/template/build"
	"github.com/cove-dev/cove/internal/store/sqlite"
)

// openBuilds opens the builds of the data dir data as a server does: their records in the
// data dir's SQLite store (a real file, opened again by each call as by each server start).
func openBuilds(t *testing.T, ts *build.Builder, data string) (*build.Builds, error) {
	t.Helper()
	return openNodeBuilds(t, ts, data, "")
}

// openNodeBuilds is openBuilds on the cluster node node.
func openNodeBuilds(t *testing.T, ts *build.Builder, data, node string) (*build.Builds, error) {
	t.Helper()
	db := openDB(t, data)
	b, err := build.OpenBuilds(context.Background(), ts, db, data, node)
	if err == nil {
		t.Cleanup(b.Close)
	}
	return b, err
}

// openDB opens the SQLite store of the data dir data, closed when the test ends.
func openDB(t *testing.T, data string) *sqlite.DB {
	t.Helper()
	db, err := sqlite.Open(context.Background(), filepath.Join(data, "cove.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// Build records as the Cove before the store wrote them: <data>/builds/<id>.json, indented,
// one finished build and one a crash left building, and a save a crash cut short.
const (
	oldReady    = "0b7a3f10-1c2d-4e5f-8a9b-0123456789ab"
	oldBuilding = "9f8e7d6c-5b4a-4321-8fed-cba987654321"
)

var oldBuildFiles = map[string]string{
	oldReady + ".json": `{
  "id": "` + oldReady + `",
  "template": "web",
  "tags": [
    "v1"
  ],
  "status": "ready",
  "request_id": "req-1",
  "team_id": "team-1",
  "cpu_count": 2,
  "memory_mb": 512,
  "steps": [
    {
      "step": "RUN echo hi",
      "cached": true,
      "seconds": 0.5
    }
  ],
  "created_at": "2026-12-01T10:00:00Z",
  "started_at": "2026-12-01T10:00:01Z",
  "finished_at": "2026-12-01T10:00:09Z"
}
`,
	oldBuilding + ".json": `{
  "id": "` + oldBuilding + `",
  "template": "api",
  "status": "building",
  "team_id": "team-2",
  "created_at": "2026-12-01T11:00:00Z",
  "started_at": "2026-12-01T11:00:01Z"
}
`,
	"." + oldReady + ".json.tmp": `{"id": "` + oldReady + `", "status": "err`,
}

func TestBuildRecordFilesMoveIntoTheStore(t *testing.T) {
	ts, err := build.OpenDir(t, filepath.Join(t.TempDir(), "templates"), nil)
	if err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	writeOld := func(t *testing.T) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(data, "builds"), 0o755); err != nil {
			t.Fatal(err)
		}
		for name, body := range oldBuildFiles {
			if err := os.WriteFile(filepath.Join(data, "builds", name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	check := func(t *testing.T, b *build.Builds) {
		t.Helper()
		recs, err := b.List("")
		if err != nil || len(recs) != 2 {
			t.Fatalf("records %+v, %v", recs, err)
		}
		ready, building := recs[0], recs[1]
		if ready.ID != oldReady || ready.Status != build.BuildReady || ready.Template != "web" || ready.TeamID != "team-1" ||
			ready.CPUCount != 2 || len(ready.Steps) != 1 || !ready.Steps[0].Cached || len(ready.Tags) != 1 || ready.FinishedAt == nil {
			t.Errorf("the finished build reads %+v", ready)
		}
		if building.ID != oldBuilding || building.Status != build.BuildError || building.Reason == nil || building.Reason.Code != build.ReasonOrphaned {
			t.Errorf("the build a crash left reads %+v, want it failed as orphaned", building)
		}
		if recs, _ := b.List("web"); len(recs) != 1 || recs[0].ID != oldReady {
			t.Errorf("builds of web: %+v", recs)
		}
		left, _ := filepath.Glob(filepath.Join(data, "builds", "*json*"))
		hidden, _ := filepath.Glob(filepath.Join(data, "builds", ".*json*"))
		if len(left)+len(hidden) != 0 {
			t.Errorf("files left after the move: %v %v", left, hidden)
		}
	}

	t.Run("the first start moves every record into the store and removes the files", func(t *testing.T) {
		writeOld(t)
		b, err := openBuilds(t, ts, data)
		if err != nil {
			t.Fatal(err)
		}
		check(t, b)
	})
	t.Run("the next start finds them in the store, once", func(t *testing.T) {
		b, err := openBuilds(t, ts, data)
		if err != nil {
			t.Fatal(err)
		}
		check(t, b)
	})
	t.Run("a start after a crash mid-move, the files still there, moves them again without doubling any", func(t *testing.T) {
		writeOld(t) // as if the crash came after the store had them and before the files went
		b, err := openBuilds(t, ts, data)
		if err != nil {
			t.Fatal(err)
		}
		check(t, b)
	})
	t.Run("a file that is no record is left in place and does not stop the start", func(t *testing.T) {
		bad := filepath.Join(data, "builds", "11111111-2222-4333-8444-555555555555.json")
		if err := os.WriteFile(bad, []byte("{not json"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := openBuilds(t, ts, data); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(bad); err != nil {
			t.Fatalf("the unreadable file: %v", err)
		}
		os.Remove(bad)
	})
}

// The nodes of a cluster share the build records: a node that starts again fails only the
// builds it ran as orphaned, never one another node is running.
func TestANodeFailsOnlyItsOwnBuildsAsOrphaned(t *testing.T) {
	ts, err := build.OpenDir(t, filepath.Join(t.TempDir(), "templates"), nil)
	if err != nil {
		t.Fatal(err)
	}
	shared := t.TempDir() // one store for both nodes, as their PostgreSQL is
	a, err := openNodeBuilds(t, ts, shared, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	rec, err := a.Request(build.NewBuild{Name: "on-a", TeamID: "team-1"})
	if err != nil {
		t.Fatal(err)
	}
	if rec.Node != "node-a" {
		t.Fatalf("the record names node %q", rec.Node)
	}
	b, err := openNodeBuilds(t, ts, shared, "node-b")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := b.Get(rec.ID); err != nil || got.Status != build.BuildWaiting {
		t.Fatalf("node-a's build after node-b started: %+v, %v", got, err)
	}
	again, err := openNodeBuilds(t, ts, shared, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := again.Get(rec.ID); err != nil || got.Status != build.BuildError || got.Reason == nil || got.Reason.Code != build.ReasonOrphaned {
		t.Fatalf("node-a's build after node-a started again: %+v, %v", got, err)
	}
}
