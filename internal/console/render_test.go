package console

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/store/sqlite"
)

// fixture is a real SQLite store holding 1,000 sandboxes of one team; the first has
// 10,000 log lines and 500 command records.
type fixture struct {
	console *Console
	cookie  *http.Cookie
	first   string
}

func newFixture(tb testing.TB) *fixture {
	tb.Helper()
	ctx := context.Background()
	db, err := sqlite.Open(ctx, filepath.Join(tb.TempDir(), "cove.db"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	team, err := db.CreateTeam(ctx, "bench")
	if err != nil {
		tb.Fatal(err)
	}
	start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for i := range 1000 {
		sb := &store.Sandbox{ID: fmt.Sprintf("sb%05d", i), TeamID: team.ID, TemplateID: "base", State: store.StateRunning,
			Metadata: map[string]string{"taskId": fmt.Sprint(i)}, CPUCount: 2, MemoryMB: 512,
			StartedAt: start.Add(time.Duration(i) * time.Second), EndAt: start.Add(time.Hour), UpdatedAt: start}
		if err := db.InsertSandbox(ctx, sb); err != nil {
			tb.Fatal(err)
		}
	}
	first := "sb00000"
	lines := make([]store.LogLine, 0, 1000)
	for i := range 10000 {
		lines = append(lines, store.LogLine{Time: start.Add(time.Duration(i) * time.Millisecond), SandboxID: first, TeamID: team.ID,
			TemplateID: "base", Level: "info", Source: "process", Stream: "stdout", PID: 1 + i/20, Message: fmt.Sprintf("line %d of the task's output", i),
			Fields: map[string]any{"taskId": "0"}})
		if len(lines) == cap(lines) {
			if err := db.InsertLogs(ctx, lines); err != nil {
				tb.Fatal(err)
			}
			lines = lines[:0]
		}
	}
	for i := range 500 {
		code := i % 3
		c := &store.CommandRecord{SandboxID: first, TeamID: team.ID, TemplateID: "base", PID: 1 + i, RequestID: fmt.Sprintf("req%04d", i),
			User: "user", Command: "/bin/bash", Args: []string{"-c", "make test"}, StartedAt: start.Add(time.Duration(i) * time.Second),
			EndedAt: start.Add(time.Duration(i)*time.Second + 300*time.Millisecond), ExitCode: &code, EndCause: store.EndExited,
			StdoutHead: "building…", StdoutTail: "done", StdoutBytes: 1 << 10}
		if err := db.UpsertCommand(ctx, c); err != nil {
			tb.Fatal(err)
		}
	}
	c := New(Config{Keys: db, Records: db})
	s := &session{TeamID: team.ID, TeamName: team.Name, KeyID: "key_bench", CSRF: token(), Expires: time.Now().Add(time.Hour)}
	c.sessions["bench-session"] = s
	return &fixture{console: c, cookie: &http.Cookie{Name: cookieName, Value: "bench-session"}, first: first}
}

func (f *fixture) get(tb testing.TB, path string) string {
	req := httptest.NewRequest(http.MethodGet, path, nil)
	req.AddCookie(f.cookie)
	rec := httptest.NewRecorder()
	f.console.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		tb.Fatalf("GET %s: %d\n%s", path, rec.Code, rec.Body)
	}
	return rec.Body.String()
}

func TestRenderFromARealStore(t *testing.T) {
	f := newFixture(t)
	tests := []struct {
		name, path string
		want       []string
		rows       int // table rows with a data-id
	}{
		{"the list shows a page of 100 and the count of all 1000", "/dashboard/", []string{`<small id="total">1000</small>`, `rel="next"`}, 100},
		{"the list filters by metadata", "/dashboard/?meta=taskId%3D7", []string{`<small id="total">1</small>`, "sb00007"}, 1},
		{"the sandbox page shows the newest log line and command", "/dashboard/sandboxes/" + f.first, []string{"line 9999 of", "req0499", "make test"}, 0},
		{"the log search keeps only matching lines", "/dashboard/sandboxes/" + f.first + "?q=%22line+42+of%22", []string{"line 42 of"}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			page := f.get(t, tt.path)
			for _, w := range tt.want {
				if !strings.Contains(page, w) {
					t.Errorf("page lacks %q", w)
				}
			}
			if n := strings.Count(page, "<tr data-id="); n != tt.rows {
				t.Errorf("%d sandbox rows, want %d", n, tt.rows)
			}
		})
	}
}

// BenchmarkRender prints the server time of one render of each page, in ms.
func BenchmarkRender(b *testing.B) {
	f := newFixture(b)
	for _, bc := range []struct{ name, path string }{
		{"list_1000_sandboxes", "/dashboard/"},
		{"sandbox_10000_logs_500_commands", "/dashboard/sandboxes/" + f.first},
	} {
		b.Run(bc.name, func(b *testing.B) {
			start := time.Now()
			for b.Loop() {
				f.get(b, bc.path)
			}
			b.ReportMetric(float64(time.Since(start).Microseconds())/1000/float64(b.N), "ms/render")
		})
	}
}

func TestCloseEndsLiveStreams(t *testing.T) {
	f := newFixture(t)
	srv := httptest.NewServer(f.console)
	t.Cleanup(srv.Close)
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/dashboard/live", nil)
	req.AddCookie(f.cookie)
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	first := make([]byte, 64)
	if _, err := res.Body.Read(first); err != nil || !strings.HasPrefix(string(first), "event: rows") {
		t.Fatalf("first read: %q %v", first, err)
	}
	f.console.Close()
	done := make(chan error, 1)
	go func() { _, err := io.Copy(io.Discard, res.Body); done <- err }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("stream ended with %v, want a clean end", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the live stream was still open 30 s after Close")
	}
}
