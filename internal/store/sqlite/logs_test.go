package sqlite

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/sdk/reason"
)

func logLine(team, sandbox string, at time.Time, level, msg string) store.LogLine {
	return store.LogLine{Time: at, SandboxID: sandbox, TeamID: team, TemplateID: "base", Level: level,
		Source: store.SourceEnvd, Message: msg}
}

func messages(p *store.LogPage) []string {
	out := []string{}
	for _, l := range p.Lines {
		out = append(out, l.Message)
	}
	return out
}

func TestQueryLogs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newDB(t)
	ms := time.Millisecond
	lines := []store.LogLine{
		logLine("team", "sb", base, "debug", "booting envd"),
		logLine("team", "sb", base.Add(ms), "info", "listening on port 49983"),
		{Time: base.Add(2 * ms), SandboxID: "sb", TeamID: "team", Level: "info", Source: store.SourceProcess,
			Stream: "stdout", PID: 7, RequestID: "req_a", Message: "npm install: 100% done",
			Fields: map[string]any{"taskId": "t1", "attempt": 2.0, "ok": true}},
		{Time: base.Add(3 * ms), SandboxID: "sb", TeamID: "team", Level: "warn", Source: store.SourceProcess,
			Stream: "stderr", PID: 7, RequestID: "req_a", Message: "npm WARN deprecated left_pad",
			Fields: map[string]any{"taskId": "t2"}},
		logLine("team", "sb", base.Add(4*ms), "error", "Process 9 failed: TIMEOUT"),
		logLine("team", "sb", base.Add(5*ms), "bogus", "an unknown level is stored as info"),
		logLine("team", "other_sb", base, "error", "another sandbox's line"),
	}
	if err := db.InsertLogs(ctx, lines); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name string
		q    store.LogQuery
		want []string
	}{
		{"no filter gives the sandbox's lines oldest first", store.LogQuery{},
			[]string{"booting envd", "listening on port 49983", "npm install: 100% done", "npm WARN deprecated left_pad",
				"Process 9 failed: TIMEOUT", "an unknown level is stored as info"}},
		{"backward gives them newest first", store.LogQuery{Backward: true, Limit: 2},
			[]string{"an unknown level is stored as info", "Process 9 failed: TIMEOUT"}},
		{"a forward cursor keeps lines at or after its millisecond", store.LogQuery{Cursor: base.Add(4 * ms)},
			[]string{"Process 9 failed: TIMEOUT", "an unknown level is stored as info"}},
		{"a backward cursor keeps lines at or before its millisecond", store.LogQuery{Cursor: base.Add(ms), Backward: true},
			[]string{"listening on port 49983", "booting envd"}},
		{"min level warn keeps warn and error", store.LogQuery{MinLevel: "warn"},
			[]string{"npm WARN deprecated left_pad", "Process 9 failed: TIMEOUT"}},
		{"search ignores ASCII case", store.LogQuery{Search: "timeout"}, []string{"Process 9 failed: TIMEOUT"}},
		{"search needs every word", store.LogQuery{Search: "npm deprecated"}, []string{"npm WARN deprecated left_pad"}},
		{"a quoted phrase matches whole", store.LogQuery{Search: `"port 49983"`}, []string{"listening on port 49983"}},
		{"LIKE wildcards in a search are literal", store.LogQuery{Search: "100%"}, []string{"npm install: 100% done"}},
		{"an underscore is literal too", store.LogQuery{Search: "lef__pad"}, []string{}},
		{"a string field matches its text", store.LogQuery{Fields: map[string]string{"taskId": "t2"}},
			[]string{"npm WARN deprecated left_pad"}},
		{"a number field matches its JSON", store.LogQuery{Fields: map[string]string{"attempt": "2"}},
			[]string{"npm install: 100% done"}},
		{"a bool field matches true", store.LogQuery{Fields: map[string]string{"ok": "true"}},
			[]string{"npm install: 100% done"}},
		{"a missing field matches nothing", store.LogQuery{Fields: map[string]string{"nope": "x"}}, []string{}},
		{"request id", store.LogQuery{RequestID: "req_a"},
			[]string{"npm install: 100% done", "npm WARN deprecated left_pad"}},
		{"source", store.LogQuery{Source: store.SourceProcess, Limit: 1}, []string{"npm install: 100% done"}},
		{"stream", store.LogQuery{Stream: "stderr"}, []string{"npm WARN deprecated left_pad"}},
		{"pid", store.LogQuery{PID: 7, Stream: "stdout"}, []string{"npm install: 100% done"}},
		{"another pid matches nothing", store.LogQuery{PID: 8}, []string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := tc.q
			q.TeamID, q.SandboxID = "team", "sb"
			page, err := db.QueryLogs(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			if got := messages(page); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %q\nwant %q", got, tc.want)
			}
		})
	}

	t.Run("a line comes back as it went in", func(t *testing.T) {
		page, err := db.QueryLogs(ctx, store.LogQuery{TeamID: "team", SandboxID: "sb", RequestID: "req_a", Limit: 1})
		if err != nil || len(page.Lines) != 1 {
			t.Fatalf("%v, %v", page, err)
		}
		if got := page.Lines[0]; !reflect.DeepEqual(got, lines[2]) {
			t.Errorf("got %+v\nwant %+v", got, lines[2])
		}
		if page.Next == nil {
			t.Error("no next position though a line follows")
		}
		page, _ = db.QueryLogs(ctx, store.LogQuery{TeamID: "team", SandboxID: "sb", Search: "bogus level"})
		if len(page.Lines) != 0 {
			t.Errorf("search matched level text: %q", messages(page))
		}
		page, _ = db.QueryLogs(ctx, store.LogQuery{TeamID: "team", SandboxID: "sb", Search: "unknown level"})
		if len(page.Lines) != 1 || page.Lines[0].Level != "info" {
			t.Errorf("unknown level line: %+v", page.Lines)
		}
	})

	t.Run("another team sees nothing of the sandbox", func(t *testing.T) {
		page, err := db.QueryLogs(ctx, store.LogQuery{TeamID: "intruder", SandboxID: "sb"})
		if err != nil || len(page.Lines) != 0 {
			t.Errorf("got %q, %v", messages(page), err)
		}
	})

	t.Run("a query without a team is refused", func(t *testing.T) {
		if _, err := db.QueryLogs(ctx, store.LogQuery{SandboxID: "sb"}); err == nil {
			t.Error("no team: no error")
		}
		if _, err := db.QueryLogs(ctx, store.LogQuery{TeamID: "team", SandboxID: "sb", MinLevel: "loud"}); err == nil {
			t.Error("unknown level: no error")
		}
	})
}

func TestQueryLogsAcrossSandboxes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newDB(t)
	ms := time.Millisecond
	py := logLine("team", "sb2", base.Add(2*ms), "info", "pip install done")
	py.TemplateID = "python"
	if err := db.InsertLogs(ctx, []store.LogLine{
		logLine("team", "sb1", base, "info", "first sandbox starts"),
		logLine("team", "sb1", base.Add(3*ms), "error", "first sandbox fails"),
		py,
		logLine("intruder", "sb9", base.Add(ms), "error", "another team's line"),
	}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		q    store.LogQuery
		want []string
	}{
		{"no sandbox searches every sandbox of the team, newest first", store.LogQuery{Backward: true},
			[]string{"first sandbox fails", "pip install done", "first sandbox starts"}},
		{"a template keeps its sandboxes' lines", store.LogQuery{TemplateID: "python"}, []string{"pip install done"}},
		{"since and until bound the time, until excluded", store.LogQuery{Since: base.Add(ms), Until: base.Add(3 * ms)},
			[]string{"pip install done"}},
		{"level and search work across sandboxes", store.LogQuery{MinLevel: "error", Search: "fails"}, []string{"first sandbox fails"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := tc.q
			q.TeamID = "team"
			page, err := db.QueryLogs(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			if got := messages(page); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %q\nwant %q", got, tc.want)
			}
		})
	}
	t.Run("a tail continues after the page's newest line without repeats", func(t *testing.T) {
		page, err := db.QueryLogs(ctx, store.LogQuery{TeamID: "team", SandboxID: "sb1", Backward: true})
		if err != nil || page.First == nil || page.Last == nil || !page.First.Time.Equal(base.Add(3*ms)) || !page.Last.Time.Equal(base) {
			t.Fatalf("first %v last %v, %v", page.First, page.Last, err)
		}
		later := logLine("team", "sb1", base.Add(3*ms), "info", "same millisecond, stored later")
		if err := db.InsertLogs(ctx, []store.LogLine{later}); err != nil {
			t.Fatal(err)
		}
		tail, err := db.QueryLogs(ctx, store.LogQuery{TeamID: "team", SandboxID: "sb1", After: page.First})
		if got := messages(tail); err != nil || !reflect.DeepEqual(got, []string{"same millisecond, stored later"}) {
			t.Fatalf("tail %q, %v", got, err)
		}
		if empty, _ := db.QueryLogs(ctx, store.LogQuery{TeamID: "team", SandboxID: "sb1", After: tail.Last}); len(empty.Lines) != 0 || empty.First != nil {
			t.Errorf("after the tail's last line: %q", messages(empty))
		}
	})
}

func TestQueryLogsPaging(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newDB(t)
	// 25 lines over 5 milliseconds: a millisecond cursor alone would repeat or skip.
	var lines []store.LogLine
	var want []string
	for i := range 25 {
		msg := fmt.Sprintf("line %02d", i)
		lines = append(lines, logLine("team", "sb", base.Add(time.Duration(i/5)*time.Millisecond), "info", msg))
		want = append(want, msg)
	}
	if err := db.InsertLogs(ctx, lines); err != nil {
		t.Fatal(err)
	}
	for _, backward := range []bool{false, true} {
		t.Run(fmt.Sprintf("pages of 4, backward %v, give every line once", backward), func(t *testing.T) {
			var got []string
			var after *store.LogPosition
			for pages := 0; ; pages++ {
				if pages > 10 {
					t.Fatal("paging does not end")
				}
				page, err := db.QueryLogs(ctx, store.LogQuery{TeamID: "team", SandboxID: "sb", Limit: 4,
					Backward: backward, After: after})
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, messages(page)...)
				if page.Next == nil {
					break
				}
				after = page.Next
			}
			exp := append([]string(nil), want...)
			if backward {
				for i, j := 0, len(exp)-1; i < j; i, j = i+1, j-1 {
					exp[i], exp[j] = exp[j], exp[i]
				}
			}
			if !reflect.DeepEqual(got, exp) {
				t.Errorf("got %q\nwant %q", got, exp)
			}
		})
	}
}

func TestPruneLogs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newDB(t)
	// 12 batches of 1000 lines over 3 sandboxes: each batch is one chunk per sandbox.
	for batch := range 12 {
		var lines []store.LogLine
		for i := batch * 1000; i < (batch+1)*1000; i++ {
			sb := fmt.Sprintf("sb%d", i%3)
			lines = append(lines, logLine("team", sb, base.Add(time.Duration(i)*time.Microsecond), "info", "x"))
		}
		if err := db.InsertLogs(ctx, lines); err != nil {
			t.Fatal(err)
		}
	}
	n, err := db.PruneLogs(ctx, base.Add(9000*time.Microsecond))
	if err != nil || n != 9000 {
		t.Fatalf("PruneLogs = %d, %v; want 9000", n, err)
	}
	for _, sb := range []string{"sb0", "sb1", "sb2"} {
		page, _ := db.QueryLogs(ctx, store.LogQuery{TeamID: "team", SandboxID: sb})
		if len(page.Lines) != 1000 || page.Lines[0].Time.Before(base.Add(9000*time.Microsecond)) {
			t.Errorf("%s keeps %d lines from %v", sb, len(page.Lines), page.Lines[0].Time)
		}
	}
	// A chunk straddling the cutoff is kept whole until its newest line is older.
	if n, err := db.PruneLogs(ctx, base.Add(9500*time.Microsecond)); err != nil || n != 0 {
		t.Fatalf("PruneLogs in a chunk = %d, %v; want 0", n, err)
	}
	if n, err := db.PruneLogs(ctx, base.Add(10000*time.Microsecond)); err != nil || n != 1000 {
		t.Fatalf("PruneLogs after a chunk = %d, %v; want 1000", n, err)
	}
	var reqs int
	db.read.QueryRowContext(ctx, `SELECT count(*) FROM log_chunks`).Scan(&reqs)
	if reqs != 6 {
		t.Errorf("%d chunks left, want 6", reqs)
	}
}

func TestLogChunks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newDB(t)

	t.Run("a big batch is cut into chunks and pages through them in order", func(t *testing.T) {
		var lines []store.LogLine
		for i := range 4500 {
			lines = append(lines, logLine("team", "big", base.Add(time.Duration(i/7)*time.Millisecond), "info", fmt.Sprintf("l%04d", i)))
		}
		if err := db.InsertLogs(ctx, lines); err != nil {
			t.Fatal(err)
		}
		var chunks int
		db.read.QueryRowContext(ctx, `SELECT count(*) FROM log_chunks WHERE sandbox_id = 'big'`).Scan(&chunks)
		if chunks != 3 {
			t.Errorf("%d chunks, want 3", chunks)
		}
		for _, backward := range []bool{false, true} {
			var got []string
			var after *store.LogPosition
			for {
				page, err := db.QueryLogs(ctx, store.LogQuery{TeamID: "team", SandboxID: "big", Limit: 333, Backward: backward, After: after})
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, messages(page)...)
				if page.Next == nil {
					break
				}
				after = page.Next
			}
			if len(got) != 4500 {
				t.Fatalf("backward %v: %d lines", backward, len(got))
			}
			for i, m := range got {
				want := i
				if backward {
					want = 4499 - i
				}
				if m != fmt.Sprintf("l%04d", want) {
					t.Fatalf("backward %v: line %d is %s", backward, i, m)
				}
			}
		}
	})

	t.Run("overlapping chunks merge in time order", func(t *testing.T) {
		ms := time.Millisecond
		for _, batch := range [][]int{{5, 1, 9}, {2, 7}, {0, 8, 3}, {6, 4}} {
			var lines []store.LogLine
			for _, at := range batch {
				lines = append(lines, logLine("team", "mix", base.Add(time.Duration(at)*ms), "info", fmt.Sprint(at)))
			}
			if err := db.InsertLogs(ctx, lines); err != nil {
				t.Fatal(err)
			}
		}
		page, err := db.QueryLogs(ctx, store.LogQuery{TeamID: "team", SandboxID: "mix", Limit: 4})
		if got := messages(page); err != nil || !reflect.DeepEqual(got, []string{"0", "1", "2", "3"}) {
			t.Errorf("forward: %q, %v", got, err)
		}
		page, err = db.QueryLogs(ctx, store.LogQuery{TeamID: "team", SandboxID: "mix", Limit: 3, Backward: true, After: page.Next})
		if got := messages(page); err != nil || !reflect.DeepEqual(got, []string{"2", "1", "0"}) {
			t.Errorf("backward after 3: %q, %v", got, err)
		}
		page, err = db.QueryLogs(ctx, store.LogQuery{TeamID: "team", SandboxID: "mix", Cursor: base.Add(6 * ms)})
		if got := messages(page); err != nil || !reflect.DeepEqual(got, []string{"6", "7", "8", "9"}) {
			t.Errorf("cursor 6: %q, %v", got, err)
		}
	})

	t.Run("fields keep their types and match as text", func(t *testing.T) {
		l := logLine("team", "fields", base, "info", "f")
		l.Fields = map[string]any{"s": "a\"b", "n": 1.5, "b": false, "z": nil, "o": map[string]any{"k": []any{1.0, "x"}},
			"dotted.key": "v"}
		if err := db.InsertLogs(ctx, []store.LogLine{l}); err != nil {
			t.Fatal(err)
		}
		page, err := db.QueryLogs(ctx, store.LogQuery{TeamID: "team", SandboxID: "fields"})
		if err != nil || len(page.Lines) != 1 || !reflect.DeepEqual(page.Lines[0].Fields, l.Fields) {
			t.Fatalf("got %+v, %v", page.Lines, err)
		}
		for k, v := range map[string]string{"s": "a\"b", "n": "1.5", "b": "false", "z": "null", "o": `{"k":[1,"x"]}`, "dotted.key": "v"} {
			page, _ := db.QueryLogs(ctx, store.LogQuery{TeamID: "team", SandboxID: "fields", Fields: map[string]string{k: v}})
			if len(page.Lines) != 1 {
				t.Errorf("field %s=%s does not match", k, v)
			}
		}
		page, _ = db.QueryLogs(ctx, store.LogQuery{TeamID: "team", SandboxID: "fields", Fields: map[string]string{"s": `"a\"b"`}})
		if len(page.Lines) != 0 {
			t.Error("a string field matched its JSON")
		}
	})

}

// TestOldLogTableMovesIntoChunks starts from a store as a release before 0025 left it, with
// lines in the logs table of migration 0003 beside chunks, and checks that opening it moves
// them into chunks (their order, fields, request ids and positions kept) and drops the table.
func TestOldLogTableMovesIntoChunks(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "cove.db")
	db := open(t, path)
	var lines []store.LogLine
	for _, at := range []int{0, 2, 4} {
		l := logLine("team", "old", base.Add(time.Duration(at)*time.Millisecond), "warn", fmt.Sprintf("new %d", at))
		l.RequestID = "req_old"
		lines = append(lines, l)
	}
	if err := db.InsertLogs(ctx, lines); err != nil {
		t.Fatal(err)
	}
	// Put the store back before 0025: the old table, with lines in it, and 0025 not applied.
	old, err := migrations.ReadFile("migrations/0003_logs.sql")
	if err != nil {
		t.Fatal(err)
	}
	table, _, _ := strings.Cut(string(old), "CREATE INDEX logs_by_request")
	if _, err := db.write.ExecContext(ctx, table+`CREATE INDEX logs_by_request ON logs (request_id) WHERE request_id != '';`); err != nil {
		t.Fatal(err)
	}
	for i, at := range []int{1, 3} {
		if _, err := db.write.ExecContext(ctx, `INSERT INTO logs (`+logColumns+`) VALUES (?, ?, 'old', 'team', 'base', 2, 'envd', '', 0, 'req_old', ?, '{"k":"v"}')`,
			toMicros(base.Add(time.Duration(at)*time.Millisecond)), int64(i), fmt.Sprintf("old %d", at)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 25000 { // more than a batch of the move, and more than a chunk
		if _, err := db.write.ExecContext(ctx, `INSERT INTO logs (`+logColumns+`) VALUES (?, ?, 'bulk', 'team', 'base', 1, 'process', 'stdout', 7, '', ?, NULL)`,
			toMicros(base.Add(time.Duration(i)*time.Microsecond)), int64(i), fmt.Sprintf("bulk %d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.write.ExecContext(ctx, `DELETE FROM schema_migrations WHERE version = 25`); err != nil {
		t.Fatal(err)
	}
	db.Close()

	db = open(t, path)
	var n int
	if err := db.read.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE name = 'logs'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("the old table is still there: %d %v", n, err)
	}
	var got []string
	var after *store.LogPosition
	for {
		page, err := db.QueryLogs(ctx, store.LogQuery{TeamID: "team", SandboxID: "old", Limit: 2, After: after, MinLevel: "warn"})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, messages(page)...)
		if page.Next == nil {
			break
		}
		after = page.Next
	}
	if want := []string{"new 0", "old 1", "new 2", "old 3", "new 4"}; !reflect.DeepEqual(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	trace, err := db.TraceLogs(ctx, "team", "req_old", 4)
	if err != nil || len(trace) != 4 || trace[1].Message != "old 1" || trace[3].Message != "old 3" {
		t.Errorf("trace: %+v, %v", trace, err)
	}
	page, _ := db.QueryLogs(ctx, store.LogQuery{TeamID: "team", SandboxID: "old", Fields: map[string]string{"k": "v"}})
	if len(page.Lines) != 2 {
		t.Errorf("old fields: %q", messages(page))
	}
	bulk, err := db.QueryLogs(ctx, store.LogQuery{TeamID: "team", SandboxID: "bulk", Limit: 1000, Backward: true})
	if err != nil || len(bulk.Lines) != 1000 || bulk.Lines[0].Message != "bulk 24999" || bulk.Lines[999].Message != "bulk 24000" {
		t.Fatalf("bulk lines: %d, %v", len(bulk.Lines), err)
	}
	if hits, _ := db.QueryLogs(ctx, store.LogQuery{TeamID: "team", SandboxID: "bulk", Search: "bulk 12345"}); len(hits.Lines) != 1 {
		t.Errorf("a moved line is not found by search: %q", messages(hits))
	}
}

func TestCommands(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newDB(t)
	start := &store.CommandRecord{SandboxID: "sb", TeamID: "team", TemplateID: "base", PID: 42, Tag: "build",
		RequestID: "req_start", User: "user", Command: "/bin/bash", Args: []string{"-l", "-c", "make"},
		Cwd: "/home/user", StartedAt: base}

	t.Run("a start record is stored while the command runs", func(t *testing.T) {
		if err := db.UpsertCommand(ctx, start); err != nil {
			t.Fatal(err)
		}
		got, err := db.GetCommand(ctx, "sb", 42, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, start) {
			t.Errorf("got %+v\nwant %+v", got, start)
		}
	})

	t.Run("the end record merges into the start record", func(t *testing.T) {
		code := 137
		end := &store.CommandRecord{SandboxID: "sb", PID: 42, StartedAt: base, EndedAt: base.Add(1500 * time.Millisecond),
			ExitCode: &code, Signal: "SIGKILL", EndCause: reason.EndKilled, SignalRequestID: "req_kill",
			StdoutBytes: 10, StdoutHead: "head", StdoutTail: "tail", Truncated: true,
			Redactions: map[string]int{"api_key": 1}}
		if err := db.UpsertCommand(ctx, end); err != nil {
			t.Fatal(err)
		}
		got, err := db.GetCommand(ctx, "sb", 42, base)
		if err != nil {
			t.Fatal(err)
		}
		want := *start
		want.EndedAt, want.Duration, want.ExitCode, want.Signal, want.EndCause = end.EndedAt, 1500*time.Millisecond, &code, "SIGKILL", reason.EndKilled
		want.SignalRequestID, want.StdoutBytes, want.StdoutHead, want.StdoutTail = "req_kill", 10, "head", "tail"
		want.Truncated, want.Redactions = true, map[string]int{"api_key": 1}
		if !reflect.DeepEqual(got, &want) {
			t.Errorf("got %+v\nwant %+v", got, &want)
		}
	})

	t.Run("an end cause outside the closed set is refused", func(t *testing.T) {
		odd := *start
		odd.PID, odd.EndedAt, odd.EndCause = 77, base.Add(time.Second), "vanished"
		if err := db.UpsertCommand(ctx, &odd); err == nil || !strings.Contains(err.Error(), `unknown end cause "vanished"`) {
			t.Errorf("UpsertCommand = %v, want the unknown end cause named", err)
		}
		if _, err := db.GetCommand(ctx, "sb", 77, time.Time{}); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("the refused record was stored: %v", err)
		}
	})

	t.Run("a reused pid gets its own record and get returns the latest", func(t *testing.T) {
		later := *start
		later.StartedAt, later.Tag, later.Args = base.Add(time.Hour), "second", nil
		if err := db.UpsertCommand(ctx, &later); err != nil {
			t.Fatal(err)
		}
		got, err := db.GetCommand(ctx, "sb", 42, time.Time{})
		if err != nil || got.Tag != "second" {
			t.Errorf("latest = %+v, %v", got, err)
		}
		first, err := db.GetCommand(ctx, "sb", 42, base)
		if err != nil || first.Tag != "build" {
			t.Errorf("by start time = %+v, %v", first, err)
		}
	})

	t.Run("an unknown pid is not found", func(t *testing.T) {
		if _, err := db.GetCommand(ctx, "sb", 43, time.Time{}); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("err = %v", err)
		}
	})

	t.Run("a listing pages newest first without repeats", func(t *testing.T) {
		for i := range 5 {
			c := &store.CommandRecord{SandboxID: "sb", TeamID: "team", PID: 100 + i, StartedAt: base.Add(time.Duration(i) * time.Minute)}
			if err := db.UpsertCommand(ctx, c); err != nil {
				t.Fatal(err)
			}
		}
		var got []int
		cursor := ""
		for {
			page, err := db.ListCommands(ctx, "sb", 3, cursor)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range page.Commands {
				got = append(got, c.PID)
			}
			if cursor = page.Next; cursor == "" {
				break
			}
		}
		if want := []int{42, 104, 103, 102, 101, 100, 42}; !reflect.DeepEqual(got, want) {
			t.Errorf("pids %v, want %v", got, want)
		}
		if _, err := db.ListCommands(ctx, "sb", 3, "!!"); err == nil {
			t.Error("a bad cursor gave no error")
		}
	})

	t.Run("prune deletes only ended commands", func(t *testing.T) {
		n, err := db.PruneCommands(ctx, base.Add(2*time.Hour))
		if err != nil || n != 1 {
			t.Errorf("PruneCommands = %d, %v; want 1", n, err)
		}
		if _, err := db.GetCommand(ctx, "sb", 42, base); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("ended command survived: %v", err)
		}
	})
}
