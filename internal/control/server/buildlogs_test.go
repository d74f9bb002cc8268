package server

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/builder/template"
	"github.com/cove-dev/cove/internal/builder/template/build"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/store/sqlite"
)

// TestBuildLogsAreReadAsASandboxsFromTheBuild: the logs API and the console read a template
// build's log by its id as a sandbox's, from the build's own log in the store (no copy of
// it in the log store), page by page, filtered as a sandbox's lines are.
func TestBuildLogsAreReadAsASandboxsFromTheBuild(t *testing.T) {
	ctx := context.Background()
	data := t.TempDir()
	db, err := sqlite.Open(ctx, filepath.Join(data, "cove.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ts, err := template.OpenAt(ctx, filepath.Join(data, "templates"), db)
	if err != nil {
		t.Fatal(err)
	}
	builds, err := build.OpenBuilds(ctx, build.New(ts, nil), db, data, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(builds.Close)
	rec, err := builds.Request(build.NewBuild{Name: "tpl", TeamID: "team-1", RequestID: "req-1"})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	var lines []store.BuildLogLine
	for i, step := range []string{"base", "1", "1", "2", "finalize"} {
		level := "info"
		if step == "finalize" {
			level = "error"
		}
		lines = append(lines, store.BuildLogLine{Seq: int64(i), Time: at.Add(time.Duration(i) * time.Second), Level: level, Step: step, Message: fmt.Sprintf("line %c of step %s", 'a'+i, step)})
	}
	if err := db.AppendBuildLog(ctx, rec.ID, lines); err != nil {
		t.Fatal(err)
	}
	reads := buildLogReads{DB: db, builds: builds}
	all := func(t *testing.T, q store.LogQuery) []string {
		t.Helper()
		var out []string
		for range 10 {
			page, err := reads.QueryLogs(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range page.Lines {
				if l.SandboxID != rec.ID || l.TemplateID != "tpl" || l.RequestID != "req-1" || l.Source != store.SourceBuild || l.Fields["build.id"] != rec.ID {
					t.Errorf("line %+v: want the build's id, template, request and source", l)
				}
				out = append(out, fmt.Sprint(l.Fields["build.step"], ":", l.Message))
			}
			if page.Next == nil {
				return out
			}
			q.After = page.Next
		}
		t.Fatal("no last page after 10")
		return nil
	}
	for _, tt := range []struct {
		name string
		q    store.LogQuery
		want []string
	}{
		{"every line comes back in order over pages of two", store.LogQuery{Limit: 2},
			[]string{"base:line a of step base", "1:line b of step 1", "1:line c of step 1", "2:line d of step 2", "finalize:line e of step finalize"}},
		{"backward is newest first", store.LogQuery{Limit: 2, Backward: true},
			[]string{"finalize:line e of step finalize", "2:line d of step 2", "1:line c of step 1", "1:line b of step 1", "base:line a of step base"}},
		{"a search keeps the lines holding every term, in any case", store.LogQuery{Search: "LINE step 1"},
			[]string{"1:line b of step 1", "1:line c of step 1"}},
		{"a level keeps that level and above", store.LogQuery{MinLevel: "error"}, []string{"finalize:line e of step finalize"}},
		{"a field selects a step", store.LogQuery{Fields: map[string]string{"build.step": "2"}}, []string{"2:line d of step 2"}},
		{"a cursor keeps the lines from its millisecond", store.LogQuery{Cursor: at.Add(3 * time.Second)},
			[]string{"2:line d of step 2", "finalize:line e of step finalize"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.q.TeamID, tt.q.SandboxID = "team-1", rec.ID
			if got := all(t, tt.q); !slices.Equal(got, tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
	t.Run("the build's lines take part in its request's trace, in time with the log store's", func(t *testing.T) {
		if err := db.InsertLogs(ctx, []store.LogLine{{Time: at.Add(1500 * time.Millisecond), SandboxID: "sbx-1", TeamID: "team-1",
			Level: "info", Source: "envd", RequestID: "req-1", Message: "a sandbox's line of the request"}}); err != nil {
			t.Fatal(err)
		}
		lines, err := reads.TraceLogs(ctx, "team-1", "req-1", 0)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, l := range lines {
			got = append(got, l.Message)
		}
		want := []string{"line a of step base", "line b of step 1", "a sandbox's line of the request", "line c of step 1", "line d of step 2", "line e of step finalize"}
		if !slices.Equal(got, want) {
			t.Errorf("trace lines %q, want %q", got, want)
		}
		if lines, err := reads.TraceLogs(ctx, "team-2", "req-1", 0); err != nil || len(lines) != 0 {
			t.Errorf("another team's trace of the request: %+v, %v", lines, err)
		}
	})
	t.Run("another team reads none of it", func(t *testing.T) {
		page, err := reads.QueryLogs(ctx, store.LogQuery{TeamID: "team-2", SandboxID: rec.ID})
		if err != nil || len(page.Lines) != 0 {
			t.Fatalf("page %+v, %v", page, err)
		}
	})
}
