package console

import (
	"bufio"
	"context"
	"encoding/json"
	"html"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/builder/template"
	"github.com/cove-dev/cove/internal/builder/template/build"
	"github.com/cove-dev/cove/internal/store"
)

// Two build records as the builds write them: a finished one of the fixture's team, and
// a running one of another team.
const (
	doneBuild  = "0b7a3f10-1c2d-4e5f-8a9b-0123456789ab"
	otherBuild = "9f8e7d6c-5b4a-4321-8fed-cba987654321"
)

func TestBuildPages(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "templates", "web"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "templates", "web", "meta.json"),
		[]byte(`{"name":"web","from":"base","created_at":"2026-12-02T00:00:00Z","build_seconds":3,"size_bytes":1024}`), 0o644); err != nil {
		t.Fatal(err)
	}
	ts, err := template.OpenAt(ctx, filepath.Join(dir, "templates"), f.db)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	end := start.Add(2500 * time.Millisecond)
	records := map[string]*build.BuildRecord{
		doneBuild: {ID: doneBuild, Template: "web", Status: build.BuildReady, RequestID: "req-build-1", TeamID: f.team,
			Steps:     []template.StepResult{{Step: "RUN apt-get install -y nginx", Cached: true, Seconds: 0.01}, {Step: "ENV PORT=80", Seconds: 1.25}},
			CreatedAt: start, StartedAt: &start, FinishedAt: &end},
		otherBuild: {ID: otherBuild, Template: "web", Status: build.BuildBuilding, RequestID: "req-other", TeamID: "other-team",
			Steps: nil, CreatedAt: start.Add(time.Minute), StartedAt: &start},
	}
	builds, err := build.OpenBuilds(ctx, build.New(ts, nil), f.db, dir, "")
	if err != nil {
		t.Fatal(err)
	}
	// Written after OpenBuilds, which fails a build left running by a crash.
	for _, r := range records {
		if err := putBuild(f.db, r); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(builds.Close)
	f.console.cfg.Templates, f.console.cfg.Builds = ts, builds
	if err := f.db.InsertLogs(ctx, []store.LogLine{
		{Time: start.Add(time.Second), SandboxID: doneBuild, TeamID: f.team, TemplateID: "web", Level: "info", Source: store.SourceBuild,
			RequestID: "req-build-1", Message: "Setting up nginx (1.22.1-9)"},
		{Time: start.Add(time.Second), SandboxID: otherBuild, TeamID: "other-team", TemplateID: "web", Level: "info", Source: store.SourceBuild,
			Message: "the other team's secret step"},
	}); err != nil {
		t.Fatal(err)
	}

	t.Run("the templates page lists the team's builds with status, duration, cache hits and request", func(t *testing.T) {
		page := f.get(t, "/dashboard/templates", http.StatusOK)
		for _, want := range []string{`<tr data-build="` + doneBuild + `">`, `href="/dashboard/builds/` + doneBuild + `"`, "2.5s", "<td>1/2</td>",
			`<a href="/dashboard/trace?id=req-build-1">req-build-1</a>`, `class="st-ready">ready</a>`} {
			if !strings.Contains(page, want) {
				t.Errorf("page lacks %q:\n%s", want, page)
			}
		}
		if strings.Contains(page, otherBuild) {
			t.Errorf("a team sees another team's build")
		}
	})
	t.Run("the build page shows its steps, timings, cache hits and log lines, and does not tail a finished build", func(t *testing.T) {
		page := f.get(t, "/dashboard/builds/"+doneBuild, http.StatusOK)
		for _, want := range []string{"RUN apt-get install -y nginx", "<td>cached</td><td>0.01 s</td>", "ENV PORT=80", "<td>built</td><td>1.25 s</td>",
			"Setting up nginx (1.22.1-9)", "req-build-1"} {
			if !strings.Contains(page, want) {
				t.Errorf("page lacks %q", want)
			}
		}
		if strings.Contains(page, "data-tail") {
			t.Errorf("a finished build's page tails its logs")
		}
	})
	t.Run("another team's build and an unknown build are not found", func(t *testing.T) {
		f.get(t, "/dashboard/builds/"+otherBuild, http.StatusNotFound)
		f.get(t, "/dashboard/builds/"+otherBuild+"/tail", http.StatusNotFound)
		f.get(t, "/dashboard/builds/nope", http.StatusNotFound)
	})
	t.Run("the admin sees every team's builds and a running build's page tails new lines", func(t *testing.T) {
		f.signIn(t, "", "admin")
		if page := f.get(t, "/dashboard/templates", http.StatusOK); !strings.Contains(page, otherBuild) || !strings.Contains(page, doneBuild) {
			t.Errorf("admin's page lacks a build")
		}
		page := f.get(t, "/dashboard/builds/"+otherBuild, http.StatusOK)
		if !strings.Contains(page, "the other team&#39;s secret step") {
			t.Errorf("page lacks the log line:\n%s", page)
		}
		m := regexp.MustCompile(`data-tail="([^"]+)"`).FindStringSubmatch(page)
		if m == nil {
			t.Fatalf("a running build's page has no live tail")
		}
		srv := httptest.NewServer(f.console)
		t.Cleanup(srv.Close)
		tctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(tctx, http.MethodGet, srv.URL+html.UnescapeString(m[1]), nil)
		req.AddCookie(f.cookie)
		res, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		if err := f.db.InsertLogs(ctx, []store.LogLine{{Time: start.Add(2 * time.Second), SandboxID: otherBuild, TeamID: "other-team",
			TemplateID: "web", Level: "info", Source: store.SourceBuild, Message: "step 2 output"}}); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(res.Body)
		ev := nextEvent(sc)
		if !strings.HasPrefix(ev, "event: lines\n") || !strings.Contains(ev, "step 2 output") || strings.Contains(ev, "secret step") {
			t.Errorf("tail event: %q", ev)
		}
		t.Run("once the build finished, the tail says it is done and ends", func(t *testing.T) {
			r := records[otherBuild]
			finished := time.Now().Add(-2 * buildLogGrace)
			r.Status, r.FinishedAt = build.BuildReady, &finished
			if err := putBuild(f.db, r); err != nil {
				t.Fatal(err)
			}
			if ev := nextEvent(sc); ev != "event: done\ndata: "+otherBuild {
				t.Errorf("after the build finished: %q", ev)
			}
			if sc.Scan() {
				t.Errorf("the stream goes on after done: %q", sc.Text())
			}
		})
	})
}

// putBuild writes the record r to the store as the builds do.
func putBuild(db store.TemplateBuilds, r *build.BuildRecord) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return db.PutTemplateBuild(context.Background(), &store.TemplateBuild{ID: r.ID, Template: r.Template, TeamID: r.TeamID,
		Status: r.Status.String(), CreatedAt: r.CreatedAt, FinishedAt: r.FinishedAt, Record: b})
}
