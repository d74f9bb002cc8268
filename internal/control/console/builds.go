package console

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/cove-dev/cove/internal/builder/template"
	"github.com/cove-dev/cove/internal/builder/template/build"
	"github.com/cove-dev/cove/internal/control/orchestrator"
	"github.com/cove-dev/cove/internal/store"
)

// Builds is the server's template builds, as the API keeps them; *build.Builds
// implements it.
type Builds interface {
	List(name string) ([]*build.BuildRecord, error)
	Get(id string) (*build.BuildRecord, error)
}

// Sizes of the builds lists of the templates page.
const (
	pageBuilds     = 50 // the newest builds, of every template
	templateBuilds = 3  // the newest builds shown in a template's row
)

// buildRow is a build as the console lists it.
type buildRow struct {
	*build.BuildRecord
	Duration  string // started to finished, or to now while it runs; "" before it starts
	CacheHits string // cached steps of all steps, "2/5"
}

func newBuildRow(r *build.BuildRecord, now time.Time) buildRow {
	row := buildRow{BuildRecord: r}
	if r.StartedAt != nil {
		end := now
		if r.FinishedAt != nil {
			end = *r.FinishedAt
		}
		row.Duration = end.Sub(*r.StartedAt).Truncate(100 * time.Millisecond).String()
	}
	hits := 0
	for _, s := range r.Steps {
		if s.Cached {
			hits++
		}
	}
	row.CacheHits = fmt.Sprintf("%d/%d", hits, len(r.Steps))
	return row
}

// visibleBuilds is the builds the viewer may see (its team's; the admin's: all), newest
// first.
func (c *Console) visibleBuilds(s *session) ([]buildRow, error) {
	if c.cfg.Builds == nil {
		return nil, nil
	}
	recs, err := c.cfg.Builds.List("")
	if err != nil {
		return nil, fmt.Errorf("list builds: %w", err)
	}
	now := c.now()
	var out []buildRow
	for _, r := range slices.Backward(recs) {
		if s.admin() || r.TeamID == s.TeamID {
			out = append(out, newBuildRow(r, now))
		}
	}
	return out, nil
}

// findBuild returns a build the viewer may see: the API's rule, a team sees only its own
// builds (the admin: every build); any other is not found.
func (c *Console) findBuild(s *session, id string) (*build.BuildRecord, error) {
	if c.cfg.Builds == nil {
		return nil, fmt.Errorf("build %s: this server has no template builds: %w", id, orchestrator.ErrNotFound)
	}
	rec, err := c.cfg.Builds.Get(id)
	if errors.Is(err, template.ErrNotFound) || (err == nil && !s.admin() && rec.TeamID != s.TeamID) {
		return nil, fmt.Errorf("build %s: %w", id, orchestrator.ErrNotFound)
	}
	return rec, err
}

// buildPage shows one build: its status and error, its steps with their timings and cache
// hits, and its log lines from the log store (live while it runs).
func (c *Console) buildPage(w http.ResponseWriter, r *http.Request) {
	s := sessionOf(r)
	rec, err := c.findBuild(s, r.PathValue("id"))
	if err != nil {
		c.fail(w, r, statusOf(err), err)
		return
	}
	logs, err := c.cfg.Records.QueryLogs(r.Context(), store.LogQuery{TeamID: rec.TeamID, SandboxID: rec.ID, Source: store.SourceBuild,
		Limit: pageLogLines, Backward: true})
	if err != nil {
		c.fail(w, r, http.StatusInternalServerError, fmt.Errorf("logs of build %s: %w", rec.ID, err))
		return
	}
	running := rec.Status == build.BuildWaiting || rec.Status == build.BuildBuilding
	c.render(w, r, "build.html", map[string]any{"Title": "Build " + rec.ID, "B": newBuildRow(rec, c.now()), "Logs": logs.Lines,
		"Running": running, "Tail": tailQuery(logView{}, logs.First)})
}

// buildTail streams a running build's new log lines, as a sandbox page's tail does, and a
// "done" event once the build finished (the page reloads, to show its steps and status).
func (c *Console) buildTail(w http.ResponseWriter, r *http.Request) {
	rec, err := c.findBuild(sessionOf(r), r.PathValue("id"))
	if err != nil {
		c.fail(w, r, statusOf(err), err)
		return
	}
	c.tailLogs(w, r, rec.TeamID, rec.ID, func() (bool, error) {
		now, err := c.cfg.Builds.Get(rec.ID)
		if err != nil {
			return false, err
		}
		return now.FinishedAt != nil && c.now().Sub(*now.FinishedAt) > buildLogGrace, nil
	})
}

// buildLogGrace is how long after a build finished its tail still waits for lines the log
// store has not written yet (it writes every 200 ms) before it says the build is done.
const buildLogGrace = 2 * time.Second
