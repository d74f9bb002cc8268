package console

import (
	"context"
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cove-dev/cove/internal/builder/template"
	"github.com/cove-dev/cove/internal/control/orchestrator"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/store/postgres"
	"github.com/cove-dev/cove/internal/store/postgres/pgtest"
	"github.com/cove-dev/cove/sdk/reason"
)

// post sends a form with the session's CSRF token and returns the status and body.
func (f *fixture) post(tb testing.TB, path string, form url.Values) (int, string) {
	tb.Helper()
	form.Set("csrf", f.csrf)
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(f.cookie)
	rec := httptest.NewRecorder()
	f.console.ServeHTTP(rec, req)
	return rec.Code, rec.Body.String()
}

func TestEventsAndWebhooksPages(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	if err := f.db.InsertWebhook(ctx, &store.Webhook{ID: "wh1", TeamID: f.team, Name: "ci hook", URL: "http://198.18.0.1/hook",
		Events: []string{"sandbox.lifecycle.killed"}, Secret: "s", CreatedAt: at}); err != nil {
		t.Fatal(err)
	}
	for i := range 150 {
		typ := "sandbox.lifecycle.created"
		if i%2 == 1 {
			typ = "sandbox.lifecycle.killed"
		}
		if _, err := f.db.InsertEvent(ctx, &store.Event{ID: fmt.Sprintf("ev%04d", i), Type: typ, Timestamp: at.Add(time.Duration(i) * time.Second),
			TeamID: f.team, SandboxID: f.first, RequestID: fmt.Sprintf("req-ev-%d", i), Data: []byte(`{"kill_reason":"request"}`)}); err != nil {
			t.Fatal(err)
		}
	}
	other, err := f.db.CreateTeam(ctx, "other")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.db.InsertEvent(ctx, &store.Event{ID: "ev-other", Type: "sandbox.lifecycle.created", Timestamp: at, TeamID: other.ID,
		SandboxID: "theirs", RequestID: "req-other", Data: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	t.Run("the events page lists the team's events newest first, a page at a time", func(t *testing.T) {
		page := f.get(t, "/dashboard/events", http.StatusOK)
		if n := strings.Count(page, `<td class="type">`); n != pageEventRows || !strings.Contains(page, "req-ev-149") || strings.Contains(page, "req-other") {
			t.Fatalf("%d rows:\n%s", n, page)
		}
		next := regexp.MustCompile(`rel="next" href="/dashboard/events\?([^"]+)"`).FindStringSubmatch(page)
		if next == nil {
			t.Fatal("no next page")
		}
		older := f.get(t, "/dashboard/events?"+strings.ReplaceAll(next[1], "&amp;", "&"), http.StatusOK)
		if n := strings.Count(older, `<td class="type">`); n != 50 || !strings.Contains(older, "req-ev-0<") || strings.Contains(older, "req-ev-50<") {
			t.Errorf("second page has %d rows", n)
		}
	})
	t.Run("the events page filters by type", func(t *testing.T) {
		page := f.get(t, "/dashboard/events?type=sandbox.lifecycle.killed", http.StatusOK)
		if strings.Contains(page, `<td class="type">sandbox.lifecycle.created`) || !strings.Contains(page, "kill reason: request") {
			t.Errorf("type filter:\n%s", page)
		}
	})
	t.Run("an unknown event type is a 400 naming type", func(t *testing.T) {
		if page := f.get(t, "/dashboard/events?type=sandbox.exploded", http.StatusBadRequest); !strings.Contains(page, "type: unknown event type") {
			t.Errorf("page:\n%s", page)
		}
	})
	t.Run("a team cannot ask for another team's events", func(t *testing.T) {
		f.get(t, "/dashboard/events?team="+other.ID, http.StatusNotFound)
	})
	t.Run("the webhooks page shows each webhook's deliveries and their state", func(t *testing.T) {
		page := f.get(t, "/dashboard/webhooks", http.StatusOK)
		if !strings.Contains(page, "ci hook") || strings.Count(page, `class="delivery-pending"`) != pageDeliveries {
			t.Errorf("webhooks page:\n%s", page)
		}
	})
}

func TestKeysPage(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	// The fixture's session is signed in with a real key of the team.
	_, own, err := f.db.CreateAPIKey(ctx, f.team, "own")
	if err != nil {
		t.Fatal(err)
	}
	f.signIn(t, f.team, own.ID)

	code, page := f.post(t, "/dashboard/keys", url.Values{"name": {"ci"}})
	key := regexp.MustCompile(`id="new-key" class="copy" tabindex="0">(e2b_[0-9a-f]+)<`).FindStringSubmatch(page)
	if code != http.StatusOK || key == nil {
		t.Fatalf("create: %d\n%s", code, page)
	}
	t.Run("a new key is shown once and works", func(t *testing.T) {
		if _, _, err := f.db.Authenticate(ctx, key[1]); err != nil {
			t.Fatalf("the new key does not authenticate: %v", err)
		}
		if again := f.get(t, "/dashboard/keys", http.StatusOK); strings.Contains(again, key[1]) || !strings.Contains(again, ">ci<") {
			t.Errorf("the key list shows the key in clear, or not its name:\n%s", again)
		}
	})
	t.Run("a key without a name is a 400 naming name", func(t *testing.T) {
		if code, page := f.post(t, "/dashboard/keys", url.Values{"name": {"  "}}); code != http.StatusBadRequest || !strings.Contains(page, "name:") {
			t.Errorf("got %d:\n%s", code, page)
		}
	})
	t.Run("a revoked key stops working and the list says so", func(t *testing.T) {
		k, _, err := f.db.Authenticate(ctx, key[1])
		if err != nil {
			t.Fatal(err)
		}
		if code, _ := f.post(t, "/dashboard/keys/"+k.ID+"/revoke", url.Values{}); code != http.StatusSeeOther {
			t.Fatalf("revoke: %d", code)
		}
		if _, _, err := f.db.Authenticate(ctx, key[1]); err == nil {
			t.Error("the revoked key still authenticates")
		}
		if page := f.get(t, "/dashboard/keys", http.StatusOK); !strings.Contains(page, `<td class="keystate">revoked`) {
			t.Errorf("list:\n%s", page)
		}
	})
	t.Run("another team's key cannot be revoked", func(t *testing.T) {
		other, _ := f.db.CreateTeam(ctx, "other")
		_, theirs, err := f.db.CreateAPIKey(ctx, other.ID, "theirs")
		if err != nil {
			t.Fatal(err)
		}
		if code, _ := f.post(t, "/dashboard/keys/"+theirs.ID+"/revoke", url.Values{}); code != http.StatusNotFound {
			t.Errorf("revoke another team's key: %d, want 404", code)
		}
		if code, _ := f.post(t, "/dashboard/keys/"+theirs.ID+"/revoke", url.Values{"team": {other.ID}}); code != http.StatusNotFound {
			t.Errorf("revoke naming another team: %d, want 404", code)
		}
	})
	t.Run("revoking the key one is signed in with ends the session", func(t *testing.T) {
		if code, _ := f.post(t, "/dashboard/keys/"+own.ID+"/revoke", url.Values{}); code != http.StatusSeeOther {
			t.Fatalf("revoke own: %d", code)
		}
		req := httptest.NewRequest(http.MethodGet, "/dashboard/keys", nil)
		req.AddCookie(f.cookie)
		rec := httptest.NewRecorder()
		f.console.ServeHTTP(rec, req)
		if rec.Code != http.StatusSeeOther || rec.Header().Get("Location") != Prefix+"login" {
			t.Errorf("after revoking its key the session answers %d %s", rec.Code, rec.Header().Get("Location"))
		}
	})
}

func TestHealthPage(t *testing.T) {
	f := newFixture(t)
	reg := prometheus.NewRegistry()
	kills := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cove_sandboxes_killed_total", Help: "Sandboxes killed, by kill reason."}, []string{"kill_reason"})
	live := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "cove_sandboxes", Help: "Sandboxes alive now, by state."}, []string{"state"})
	reg.MustRegister(kills, live)
	f.console.cfg.Metrics = reg
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	f.console.now = func() time.Time { return now }
	kills.WithLabelValues("oom").Add(3)
	live.WithLabelValues("running").Set(7)

	first := f.get(t, "/dashboard/health", http.StatusOK)
	if !strings.Contains(first, "kill_reason=oom</td><td class=\"num\">3</td>") || !strings.Contains(first, "state=running</td><td class=\"num\">7</td>") {
		t.Fatalf("first read:\n%s", first)
	}
	kills.WithLabelValues("oom").Add(20)
	now = now.Add(10 * time.Second)
	second := f.get(t, "/dashboard/health", http.StatusOK)
	if !strings.Contains(second, `<td class="num">2/s</td>`) || !strings.Contains(second, "over the last 10s") {
		t.Errorf("second read has no rate of 2/s over 10s:\n%s", second)
	}
}

func TestTemplatesPage(t *testing.T) {
	f := newFixture(t)
	dir := t.TempDir()
	// A template as the store writes it: <dir>/<name>/meta.json and build.log.
	for name, meta := range map[string]string{
		"base":     `{"name":"base","suite":"bookworm","created_at":"2026-12-01T00:00:00Z","build_seconds":41.5,"size_bytes":183500800}`,
		"python":   `{"name":"python","from":"base","run":["apt-get install -y python3"],"created_at":"2026-12-02T00:00:00Z","build_seconds":12,"size_bytes":1048576,"collect_logs":false}`,
		"theirs":   `{"name":"theirs","from":"base","created_at":"2026-12-02T00:00:00Z","team_id":"another-team"}`,
		"shared":   `{"name":"shared","from":"base","created_at":"2026-12-02T00:00:00Z","team_id":"another-team","public":true}`,
		"ours":     `{"name":"ours","from":"base","created_at":"2026-12-02T00:00:00Z","team_id":"` + f.team + `"}`,
		"apibuilt": `{"name":"apibuilt","from":"base","created_at":"2026-12-03T00:00:00Z","build_id":"bld_0123"}`,
	} {
		if err := os.MkdirAll(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name, "meta.json"), []byte(meta), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "python", "build.log"), []byte(strings.Repeat("x", buildLogTail)+"\nSetting up python3 (3.11.2-1)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ts, err := template.OpenAt(context.Background(), dir, f.db)
	if err != nil {
		t.Fatal(err)
	}
	f.console.cfg.Templates = ts
	f.console.cfg.Pools = func(team string) []orchestrator.PoolStatus {
		return []orchestrator.PoolStatus{{Template: "base", Target: 4, Ready: 3}, {Template: "python", Target: 2, Ready: 0, LastError: "envd did not come up"}}
	}

	t.Run("each template's warm pool shows what is ready and a failing refill", func(t *testing.T) {
		page := f.get(t, "/dashboard/templates", http.StatusOK)
		for _, want := range []string{`<td class="pool">3 of 4 ready</td>`, `2 ready <span class="st-error" title="envd did not come up">refill failing</span>`, `<td class="pool">–</td>`} {
			if !strings.Contains(page, want) {
				t.Errorf("page lacks %q", want)
			}
		}
	})
	t.Run("a team sees every template with its live sandboxes, not the steps", func(t *testing.T) {
		page := f.get(t, "/dashboard/templates", http.StatusOK)
		for _, want := range []string{`<tr data-template="base">`, "Debian bookworm", "175.0 MiB", `<a href="/dashboard/?template=base">1000</a>`,
			`<tr data-template="python">`, `<a href="/dashboard/?template=python">0</a>`, "<td>no</td>"} {
			if !strings.Contains(page, want) {
				t.Errorf("page lacks %q", want)
			}
		}
		if strings.Contains(page, "apt-get install") || strings.Contains(page, "/log\"") {
			t.Errorf("a team sees build steps or logs:\n%s", page)
		}
		f.get(t, "/dashboard/templates/python/log", http.StatusForbidden)
	})
	t.Run("a team sees its own, public and host templates, never another team's private ones", func(t *testing.T) {
		page := f.get(t, "/dashboard/templates", http.StatusOK)
		for _, want := range []string{`data-template="ours"`, `data-template="shared"`, `data-template="base"`} {
			if !strings.Contains(page, want) {
				t.Errorf("page lacks %s", want)
			}
		}
		if strings.Contains(page, `data-template="theirs"`) {
			t.Errorf("a team sees another team's private template:\n%s", page)
		}
	})
	t.Run("the admin reads the steps and the end of the build log", func(t *testing.T) {
		f.signIn(t, "", "admin")
		if page := f.get(t, "/dashboard/templates", http.StatusOK); !strings.Contains(page, "apt-get install -y python3") || !strings.Contains(page, `data-template="theirs"`) {
			t.Errorf("admin's page lacks the steps:\n%s", page)
		}
		page := f.get(t, "/dashboard/templates/python/log", http.StatusOK)
		if !strings.Contains(page, "Setting up python3") || !strings.Contains(page, "The last 64 KiB") {
			t.Errorf("build log page:\n%.2000s", page)
		}
		if page := f.get(t, "/dashboard/templates/base/log", http.StatusOK); !strings.Contains(page, "no build log") {
			t.Errorf("a template without a log:\n%s", page)
		}
		f.get(t, "/dashboard/templates/nope/log", http.StatusNotFound)
		// Built through the API: its log is its build's, in the store.
		req := httptest.NewRequest(http.MethodGet, "/dashboard/templates/apibuilt/log", nil)
		req.AddCookie(f.cookie)
		rec := httptest.NewRecorder()
		f.console.ServeHTTP(rec, req)
		if rec.Code != http.StatusSeeOther || rec.Header().Get("Location") != "/dashboard/builds/bld_0123" {
			t.Errorf("an API-built template's log: %d to %q, want its build's page", rec.Code, rec.Header().Get("Location"))
		}
	})
}

func TestUnknownPagesNameTheRequestID(t *testing.T) {
	f := newFixture(t)
	for _, path := range []string{"/dashboard/nope", "/dashboard/logout", "/dashboard/sandboxes/sb00000/explode"} {
		t.Run(path+" is a console 404 with the request id", func(t *testing.T) {
			page := f.get(t, path, http.StatusNotFound)
			if !strings.Contains(page, "no console page GET "+path) || !strings.Contains(page, "Request id") {
				t.Errorf("page:\n%s", page)
			}
		})
	}
}

func TestAdminSessionsEndWhenTheTokenChanges(t *testing.T) {
	f := newFixture(t)
	f.signIn(t, "", "admin")
	f.get(t, "/dashboard/", http.StatusOK)
	tests := []struct{ name, token string }{
		{"a new admin token ends the session", "rotated-token"},
		{"switching admin sign-in off ends the session", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f.console.cfg.AdminToken = tt.token
			t.Cleanup(func() { f.console.cfg.AdminToken = "admin-token" })
			f.get(t, "/dashboard/", http.StatusSeeOther)
		})
	}
	t.Run("the same token keeps it", func(t *testing.T) { f.get(t, "/dashboard/", http.StatusOK) })
}

func TestEventPayloadsReadAsText(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	killed := `{"api_key_name":"ci","kill_reason":"timeout","end_at":"2026-12-01T01:00:00Z",
		"execution":{"started_at":"2026-12-01T00:00:00Z","vcpu_count":2,"memory_mb":512,"execution_time":3108},
		"postmortem":{"at":"2026-12-01T01:00:00Z","detail":"envd exited: code 2","process_count":3,
			"processes":[{"pid":41,"ppid":1,"state":"R","command":"python3 train.py","rss_bytes":209715200}],
			"resources":{"memory_bytes":268435456,"memory_max_bytes":300000000,"memory_limit_bytes":536870912,"oom_kills":1,"cpu_seconds":12.5,"pids":3,"pids_limit":1024},
			"last_output":["epoch 3 of 10"]}}`
	if _, err := f.db.InsertEvent(ctx, &store.Event{ID: "ev-killed", Type: "sandbox.lifecycle.killed", Timestamp: at, TeamID: f.team,
		SandboxID: f.first, RequestID: "req-kill", Data: []byte(killed)}); err != nil {
		t.Fatal(err)
	}
	page := html.UnescapeString(f.get(t, "/dashboard/sandboxes/"+f.first, http.StatusOK))
	for _, want := range []string{
		"<dt>kill reason</dt><dd>timeout</dd>", "<dt>execution time</dt><dd>3.108s</dd>", "<dt>execution memory</dt><dd>512 MB</dd>",
		"<dt>api key name</dt><dd>ci</dd>", "Post-mortem at", "envd exited: code 2",
		"<td>41</td><td>1</td><td>R</td><td>200.0 MiB</td><td><code>python3 train.py</code></td>",
		"<dt>memory</dt><dd>256.0 MiB of 512.0 MiB</dd>", "1 of 3 processes", "epoch 3 of 10",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the sandbox page lacks %q", want)
		}
	}
	for _, never := range []string{"map[", `"rss_bytes"`, "execution_time"} {
		if strings.Contains(page, never) {
			t.Errorf("the sandbox page shows %q", never)
		}
	}
	if events := html.UnescapeString(f.get(t, "/dashboard/events", http.StatusOK)); !strings.Contains(events, "execution time: 3.108s") || strings.Contains(events, "map[") {
		t.Errorf("the events page does not read the payload as text")
	}
}

// TestTracePageIsAWaterfall: a request's steps are rows on one time axis, each bar as long
// as the step took (an access line's duration_ms, a command's run), marks for the rest,
// earliest start first, with the node that logged a step.
func TestTracePageIsAWaterfall(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	line := func(ms int, source, msg string, fields map[string]any) store.LogLine {
		return store.LogLine{Time: at.Add(time.Duration(ms) * time.Millisecond), SandboxID: f.first, TeamID: f.team, TemplateID: "base",
			Level: "info", Source: source, RequestID: "req-wf", Message: msg, Fields: fields}
	}
	if err := f.db.InsertLogs(ctx, []store.LogLine{
		line(200, store.SourceServer, "request done", map[string]any{"duration_ms": 200.0, "node": "node-a"}),
		line(150, store.SourceServer, "proxied", map[string]any{"duration_ms": 100.0, "node": "node-c"}),
		line(60, store.SourceEnvd, "process started", nil),
	}); err != nil {
		t.Fatal(err)
	}
	code := 0
	if err := f.db.UpsertCommand(ctx, &store.CommandRecord{SandboxID: f.first, TeamID: f.team, TemplateID: "base", PID: 9, RequestID: "req-wf",
		User: "user", Command: "make", StartedAt: at.Add(60 * time.Millisecond), EndedAt: at.Add(140 * time.Millisecond), ExitCode: &code,
		EndCause: reason.EndExited}); err != nil {
		t.Fatal(err)
	}
	page := html.UnescapeString(f.get(t, "/dashboard/trace?id=req-wf", http.StatusOK))
	rows := regexp.MustCompile(`(?s)<tr class="src-(\w+) [^"]*"><td class="when"[^>]*>([^<]*)</td><td class="src">\w+</td><td>([^<]*)</td>.*?<span class="bar( mark)?" style="left:([0-9.]+)%;width:([0-9.]+)%"`).FindAllStringSubmatch(page, -1)
	if len(rows) != 5 {
		t.Fatalf("%d rows:\n%s", len(rows), page)
	}
	type row struct{ source, at, node, left, width string }
	var got []row
	for _, r := range rows {
		got = append(got, row{r[1], r[2], r[3], r[5], r[6]})
	}
	want := []row{
		{"server", "+0µs", "node-a", "0.00", "100.00"},  // the request, 0–200 ms
		{"server", "+50ms", "node-c", "25.00", "50.00"}, // the proxy hop, 50–150 ms
		{"envd", "+60ms", "", "30.00", "0.40"},          // a mark
		{"command", "+60ms", "", "30.00", "0.40"},       // the command's start, a mark
		{"command", "+60ms", "", "30.00", "40.00"},      // the command, 60–140 ms
	}
	sortRows := func(rs []row) {
		sort.SliceStable(rs, func(i, j int) bool { return rs[i].left+rs[i].width < rs[j].left+rs[j].width })
	}
	sortRows(got)
	sortRows(want)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("waterfall rows:\n got %+v\nwant %+v", got, want)
	}
	if !strings.Contains(page, "over 200ms") {
		t.Error("the page does not say how long the request took")
	}
}

// TestNodesPage: the admin sees every node with its state and use against its capacity; a
// team does not; a server that is no cluster node says so.
func TestNodesPage(t *testing.T) {
	f := newFixture(t)
	f.signIn(t, "", "admin")
	f.get(t, "/dashboard/nodes", http.StatusNotFound)
	ctx := context.Background()
	db, err := postgres.Open(ctx, pgtest.StartFor(t).NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	for _, name := range []string{"node-a", "node-b"} {
		if err := db.RegisterNode(ctx, &store.Node{Name: name, AdvertiseURL: "http://198.18.0.2:3000", VCPUs: 4, MemoryMB: 8192,
			MaxSandboxes: 10, MaxStarts: 2, Templates: []string{"base"}, Version: "test"}, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Reserve(ctx, store.Reservation{SandboxID: "sb", Node: "node-a", TeamID: f.team, VCPUs: 2, MemoryMB: 2048}, store.TeamLimits{}); err != nil {
		t.Fatal(err)
	}
	if err := db.SetNodeState(ctx, "node-b", store.NodeDraining); err != nil {
		t.Fatal(err)
	}
	f.console.cfg.Nodes = db
	page := f.get(t, "/dashboard/nodes", http.StatusOK)
	for _, want := range []string{`data-node="node-a"`, "1/10", "2/4", "2048/8192 MB", `style="width:50%"`, `class="node-draining"`, ">base<"} {
		if !strings.Contains(page, want) {
			t.Errorf("the nodes page lacks %q", want)
		}
	}
	keys, err := f.db.ListAPIKeys(ctx, f.team)
	if err != nil || len(keys) == 0 {
		t.Fatal(keys, err)
	}
	f.signIn(t, f.team, keys[0].ID)
	f.get(t, "/dashboard/nodes", http.StatusForbidden)
}
