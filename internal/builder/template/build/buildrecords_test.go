package build

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cove-dev/cove/internal/builder/template"
	"github.com/cove-dev/cove/internal/store/sqlite"
)

// TestABuildsLogIsReadFromTheStoreAndCutAtItsCap: a build's lines are in the store as soon
// as anything reads them (no wait for the batch), in order, cut at the cap with one note, and
// the line that says how the build ended is kept past it.
func TestABuildsLogIsReadFromTheStoreAndCutAtItsCap(t *testing.T) {
	ctx := context.Background()
	b, db := testBuilds(t)
	b.logCap = 40
	r, err := b.Request(NewBuild{Name: "capped", TeamID: "team-1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []string{"first line", "second line", "third line", "over the cap", "dropped too"} {
		b.log(r, "1", "info", l)
	}
	b.log(r, "finalize", "error", "step 1 failed")
	var got []string
	for _, e := range b.Logs(r, 0) {
		got = append(got, e.Level+" "+e.Step+": "+e.Message)
	}
	want := []string{"info 1: first line", "info 1: second line", "info 1: third line",
		"info 1: ==> build log cut at 40 bytes: later output is not kept", "error finalize: step 1 failed"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("log:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if n, err := db.BuildLogLen(ctx, r.ID); err != nil || n != len(want) {
		t.Fatalf("the store holds %d lines (%v), want %d", n, err, len(want))
	}
	if tail := b.Logs(r, 3); len(tail) != 2 || tail[1].Message != "step 1 failed" {
		t.Fatalf("from offset 3: %+v", tail)
	}
}

// TestAFailedBuildsRecordEndsWithItsLastTenLines: the record of a failed build keeps the
// last ten lines of its log, the error last, read from the store.
func TestAFailedBuildsRecordEndsWithItsLastTenLines(t *testing.T) {
	b, _ := testBuilds(t)
	r, err := b.Request(NewBuild{Name: "fails", TeamID: "team-1"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 15 {
		b.log(r, "1", "info", fmt.Sprintf("line %d", i))
	}
	b.finish(r, nil, &StepError{Index: 1, Step: template.Step{Kind: template.StepRun, Args: []string{"false"}}, Err: errors.New("exit status 1")})
	got, err := b.Get(r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != BuildError || got.Reason == nil || got.Reason.Step != "1" || len(got.Reason.Lines) != 10 {
		t.Fatalf("record %+v", got)
	}
	if first, last := got.Reason.Lines[0], got.Reason.Lines[9]; first.Message != "line 6" || last.Level != "error" || !strings.Contains(last.Message, "exit status 1") {
		t.Fatalf("lines from %+v to %+v", first, last)
	}
}

// testBuilds is a Builds over a new SQLite store and template store, closed with the test.
func testBuilds(t *testing.T) (*Builds, *sqlite.DB) {
	t.Helper()
	data := t.TempDir()
	db, err := sqlite.Open(context.Background(), filepath.Join(data, "cove.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ts, err := openDir(t, filepath.Join(data, "templates"), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := OpenBuilds(context.Background(), ts, db, data, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b, db
}
