package console

import (
	"bufio"
	"context"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/store/sqlite"
	"github.com/cove-dev/cove/sdk/reason"
)

// fixture is a real SQLite store holding 1,000 sandboxes of one team; the first has
// 10,000 log lines and 500 command records.
type fixture struct {
	db      *sqlite.DB
	team    string
	console *Console
	cookie  *http.Cookie
	csrf    string
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
			EndedAt: start.Add(time.Duration(i)*time.Second + 300*time.Millisecond), ExitCode: &code, EndCause: reason.EndExited,
			StdoutHead: "building…", StdoutTail: "done", StdoutBytes: 1 << 10}
		if err := db.UpsertCommand(ctx, c); err != nil {
			tb.Fatal(err)
		}
	}
	// Two samples of every sandbox, and a day of samples every 5 s (17,280) of the first,
	// whose network counters stay zero.
	var samples []store.MetricSample
	for i := range 1000 {
		for k := range 2 {
			samples = append(samples, store.MetricSample{SandboxID: fmt.Sprintf("sb%05d", i), TeamID: team.ID, CPUCount: 2,
				Time: start.Add(time.Duration(k) * 5 * time.Second), CPUUsedPct: 13, MemUsed: 64 << 20, MemTotal: 512 << 20})
		}
	}
	if err := db.InsertSamples(ctx, samples); err != nil {
		tb.Fatal(err)
	}
	samples = samples[:0]
	for i := range 17280 {
		samples = append(samples, store.MetricSample{SandboxID: first, TeamID: team.ID, CPUCount: 2, Time: start.Add(time.Duration(i) * 5 * time.Second),
			CPUUsedPct: float64(i % 100), MemUsed: uint64(100+i%50) << 20, MemTotal: 512 << 20, DiskUsed: uint64(i) << 12, DiskTotal: 1 << 30})
	}
	if err := db.InsertSamples(ctx, samples); err != nil {
		tb.Fatal(err)
	}
	c := New(Config{Keys: db, Sessions: db, Records: db, AdminToken: "admin-token"})
	_, key, err := db.CreateAPIKey(ctx, team.ID, "bench")
	if err != nil {
		tb.Fatal(err)
	}
	f := &fixture{db: db, team: team.ID, console: c, first: first}
	f.signIn(tb, team.ID, key.ID)
	return f
}

// adminHash is what an admin session (teamID "") of the fixture's console holds.
func adminHash(teamID string) string {
	if teamID != "" {
		return ""
	}
	return tokenHash("admin-token")
}

// signIn makes the fixture's requests those of a session of team teamID signed in with
// key keyID ("" and "admin" for the admin).
func (f *fixture) signIn(tb testing.TB, teamID, keyID string) {
	tb.Helper()
	tok := token()
	f.csrf = token()
	if err := f.db.InsertConsoleSession(context.Background(), &store.ConsoleSession{TokenHash: tokenHash(tok), TeamID: teamID, TeamName: "bench",
		KeyID: keyID, CSRF: f.csrf, CreatedAt: time.Now(), Expires: time.Now().Add(time.Hour), AdminHash: adminHash(teamID)}); err != nil {
		tb.Fatal(err)
	}
	f.cookie = &http.Cookie{Name: cookieName, Value: tok}
}

func (f *fixture) get(tb testing.TB, path string, code int) string {
	req := httptest.NewRequest(http.MethodGet, path, nil)
	req.AddCookie(f.cookie)
	rec := httptest.NewRecorder()
	f.console.ServeHTTP(rec, req)
	if rec.Code != code {
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
		{"the list filters by template in the store, so the count is the filter's", "/dashboard/?template=python", []string{`<small id="total">0</small>`, "No sandboxes match."}, 0},
		{"the sandbox page shows the newest log line and command", "/dashboard/sandboxes/" + f.first, []string{"line 9999 of", "req0499", "make test"}, 0},
		{"the list shows each running sandbox's CPU and memory now", "/dashboard/?meta=taskId%3D7", []string{`<td class="cpu" title="sampled 2026-12-01T00:00:05Z">13% <small>of 2 vCPU`, "64.0 MiB / 512.0 MiB"}, 1},
		{"the sandbox page plots a day of samples and says network has no data", "/dashboard/sandboxes/" + f.first,
			[]string{`aria-label="CPU: now`, "Memory: now 149.0 MiB, peak 149.0 MiB of 512.0 MiB", `<figcaption>Network: no data</figcaption><p class="nodata">no data</p>`}, 0},
		{"the logs page searches every sandbox of the team, newest first, in pages", "/dashboard/logs?q=line",
			[]string{`<a href="/dashboard/sandboxes/sb00000">`, "line 9999 of", `rel="next" href="/dashboard/logs?cursor=`}, 0},
		{"the logs page narrows by metadata, template and time range", "/dashboard/logs?meta=taskId%3D0&template=base&since=2026-12-01T00:00:09&until=2026-12-01T00:00:09.002Z&tz=0",
			[]string{"line 9000 of", "line 9001 of"}, 0},
		{"the logs page reads a time in the viewer's zone", "/dashboard/logs?since=2026-12-01T01:00:09.998&tz=-60",
			[]string{"line 9998 of", "line 9999 of"}, 0},
		{"a template with no lines shows none", "/dashboard/logs?template=python", []string{"No log lines match."}, 0},
		{"the log search keeps only matching lines", "/dashboard/sandboxes/" + f.first + "?q=%22line+42+of%22", []string{"line 42 of"}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			page := f.get(t, tt.path, http.StatusOK)
			for _, w := range tt.want {
				if !strings.Contains(page, w) {
					t.Errorf("page lacks %q", w)
				}
			}
			if strings.Contains(tt.path, "since=") {
				if n := strings.Count(page, `<tr class="lvl-`); n != 2 {
					t.Errorf("%d lines in the time range, want 2", n)
				}
			}
			if n := strings.Count(page, "<tr data-id="); n != tt.rows {
				t.Errorf("%d sandbox rows, want %d", n, tt.rows)
			}
		})
	}
}

func TestLogsPageRejectsBadInput(t *testing.T) {
	f := newFixture(t)
	for _, tt := range []struct{ name, query, field string }{
		{"an unknown level names level", "level=loud", "level"},
		{"a time that is not one names since", "since=yesterday", "since:"},
		{"until before since names until", "since=2026-12-02T00:00&until=2026-12-01T00:00", "until:"},
		{"a field without = names field", "field=taskId", "field:"},
		{"metadata without = names meta", "meta=taskId", "meta:"},
		{"a forged cursor names cursor", "cursor=zzz", "cursor"},
		{"a bad time zone names tz", "tz=east", "tz:"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			page := f.get(t, "/dashboard/logs?"+tt.query, http.StatusBadRequest)
			if !strings.Contains(page, tt.field) || !strings.Contains(page, "Request id") {
				t.Errorf("page lacks %q or the request id:\n%s", tt.field, page)
			}
		})
	}
}

func TestTailSendsOnlyNewLines(t *testing.T) {
	f := newFixture(t)
	srv := httptest.NewServer(f.console)
	t.Cleanup(srv.Close)
	page := f.get(t, "/dashboard/sandboxes/"+f.first, http.StatusOK)
	m := regexp.MustCompile(`data-tail="([^"]+)"`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no data-tail on the page")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// tail opens the page's tail (resuming after lastID when set), stores a line, and
	// returns the first event.
	tail := func(t *testing.T, lastID, message string, sec int) string {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+html.UnescapeString(m[1]), nil)
		req.AddCookie(f.cookie)
		if lastID != "" {
			req.Header.Set("Last-Event-ID", lastID)
		}
		res, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("tail: %d", res.StatusCode)
		}
		line := store.LogLine{Time: time.Date(2026, 12, 1, 0, 0, sec, 0, time.UTC), SandboxID: f.first, TeamID: f.team, TemplateID: "base",
			Level: "warn", Source: "process", Stream: "stderr", Message: message}
		if err := f.db.InsertLogs(ctx, []store.LogLine{line}); err != nil {
			t.Fatal(err)
		}
		return nextEvent(bufio.NewScanner(res.Body))
	}
	first := tail(t, "", "tailed line", 20)
	if !strings.HasPrefix(first, "event: lines\nid: ") || !strings.Contains(first, "tailed line") || strings.Contains(first, "line 9999 of") {
		t.Fatalf("first event: %q", first)
	}
	t.Run("a reconnecting browser gets only the lines after the last event it saw", func(t *testing.T) {
		id := strings.TrimPrefix(strings.Split(first, "\n")[1], "id: ")
		again := tail(t, id, "after reconnecting", 21)
		if !strings.Contains(again, "after reconnecting") || strings.Contains(again, "tailed line") {
			t.Errorf("after reconnecting: %q", again)
		}
	})
}

// nextEvent reads the next Server-Sent Event of a stream, its lines joined.
func nextEvent(sc *bufio.Scanner) string {
	var got []string
	for sc.Scan() {
		if sc.Text() == "" && got != nil {
			break
		}
		got = append(got, sc.Text())
	}
	return strings.Join(got, "\n")
}

// BenchmarkRender prints the server time of one render of each page, in ms.
func BenchmarkRender(b *testing.B) {
	f := newFixture(b)
	for _, bc := range []struct{ name, path string }{
		{"list_1000_sandboxes", "/dashboard/"},
		{"sandbox_10000_logs_500_commands", "/dashboard/sandboxes/" + f.first},
		{"logs_search_all_sandboxes", "/dashboard/logs?q=%22line+42%22&level=info"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			start := time.Now()
			for b.Loop() {
				f.get(b, bc.path, http.StatusOK)
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

func TestPlotsDownsample(t *testing.T) {
	start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	sample := func(sec int, cpu float64, mem, net uint64) store.MetricSample {
		return store.MetricSample{Time: start.Add(time.Duration(sec) * time.Second), CPUUsedPct: cpu, MemUsed: mem, MemTotal: 1000, NetRxBytes: net}
	}
	var day []store.MetricSample
	for i := range 17280 {
		day = append(day, sample(i*5, float64(i%2)*100, uint64(i%7), uint64(i)*500))
	}
	tests := []struct {
		name    string
		samples []store.MetricSample
		check   func(t *testing.T, ps []plot)
	}{
		{"no samples give four empty plots that say no data", nil, func(t *testing.T, ps []plot) {
			for _, p := range ps {
				if len(p.Values) != 0 || !strings.Contains(string(p.SVG()), "no data") {
					t.Errorf("%s: %v", p.Name, p.Values)
				}
			}
		}},
		{"a day of samples is cut to the plot's points, CPU averaged and memory maxed", day, func(t *testing.T, ps []plot) {
			cpu, mem, net := ps[0], ps[1], ps[3]
			if len(cpu.Values) != plotPoints || len(mem.Values) != plotPoints || len(net.Values) != plotPoints {
				t.Fatalf("points: cpu %d mem %d net %d, want %d", len(cpu.Values), len(mem.Values), len(net.Values), plotPoints)
			}
			for i := range cpu.Values {
				if cpu.Values[i] < 40 || cpu.Values[i] > 60 || mem.Values[i] != 6 {
					t.Fatalf("bucket %d: cpu %v mem %v, want about 50 and 6", i, cpu.Values[i], mem.Values[i])
				}
			}
			if got := net.Values[10]; got != 100 {
				t.Errorf("network rate %v B/s, want 100 (500 B every 5 s)", got)
			}
		}},
		{"a counter that goes back does not plot a negative rate", []store.MetricSample{sample(0, 1, 1, 900), sample(5, 1, 1, 100), sample(10, 1, 1, 600)}, func(t *testing.T, ps []plot) {
			for _, v := range ps[3].Values {
				if v < 0 {
					t.Fatalf("network %v", ps[3].Values)
				}
			}
		}},
		{"one sample draws a flat line", []store.MetricSample{sample(0, 50, 10, 0)}, func(t *testing.T, ps []plot) {
			if svg := string(ps[0].SVG()); !strings.Contains(svg, `points="4.0,60.0 596.0,60.0"`) {
				t.Errorf("svg: %s", svg)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.check(t, plots(tt.samples)) })
	}
}
