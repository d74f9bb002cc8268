package api

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/cove-dev/cove/internal/store"
	cove "github.com/cove-dev/cove/sdk"
)

// teamBody is E2B's Team: the caller's own team, with the key it called with.
type teamBody = cove.Team

// teamMetric is E2B's TeamMetric.
type teamMetric = cove.TeamMetric

// maxTeamMetric is E2B's MaxTeamMetric.
type maxTeamMetric = cove.MaxTeamMetric

// teamMetricPoints is the most points a team's series has; the step grows with the range.
const teamMetricPoints = 300

// teamMetricStep is the finest step of a team's series.
const teamMetricStep = 5 * time.Second

// teams answers GET /teams: a key belongs to one team, so the list is the caller's.
func (a *api) teams(w http.ResponseWriter, r *http.Request, c caller) error {
	writeJSON(w, http.StatusOK, []teamBody{{ID: c.team.ID, Name: c.team.Name, APIKey: apiKeyFrom(r), IsDefault: true}})
	return nil
}

// teamMetrics answers GET /teams/{teamID}/metrics: concurrent sandboxes and starts per
// second over [start, end), from the sandbox records.
func (a *api) teamMetrics(w http.ResponseWriter, r *http.Request, c caller) error {
	series, err := a.teamSeries(r, c)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, series)
	return nil
}

// teamMetricsMax answers GET /teams/{teamID}/metrics/max?metric=…: the series' largest value
// and when it was reached.
func (a *api) teamMetricsMax(w http.ResponseWriter, r *http.Request, c caller) error {
	metric := r.URL.Query().Get("metric")
	if metric != "concurrent_sandboxes" && metric != "sandbox_start_rate" {
		return fmt.Errorf("%w: metric %q: want concurrent_sandboxes or sandbox_start_rate", errBadRequest, metric)
	}
	series, err := a.teamSeries(r, c)
	if err != nil {
		return err
	}
	best := maxTeamMetric{Value: math.Inf(-1)}
	for _, p := range series {
		v := p.SandboxStartRate
		if metric == "concurrent_sandboxes" {
			v = float64(p.ConcurrentSandboxes)
		}
		if v > best.Value {
			best = maxTeamMetric{Timestamp: p.Timestamp, TimestampUnix: p.TimestampUnix, Value: v}
		}
	}
	writeJSON(w, http.StatusOK, best)
	return nil
}

// teamSeries reads the team, the range (unix seconds; the last hour by default) and the
// spans, and samples them at most teamMetricPoints times.
func (a *api) teamSeries(r *http.Request, c caller) ([]teamMetric, error) {
	if id := r.PathValue("teamID"); id != c.team.ID {
		return nil, fmt.Errorf("%w: team %q is not the team of this API key", errForbidden, id)
	}
	now := time.Now()
	end, err := unixParam(r, "end", now)
	if err != nil {
		return nil, err
	}
	if r.URL.Query().Has("end") {
		// end names a whole second, and everything in it counts (a sandbox started at
		// 12:00:00.4 is in end=12:00:00): the series ends where that second does.
		end = end.Add(time.Second)
	}
	start, err := unixParam(r, "start", end.Add(-time.Hour))
	if err != nil {
		return nil, err
	}
	if !start.Before(end) {
		return nil, fmt.Errorf("%w: start %d is not before end %d", errBadRequest, start.Unix(), end.Unix())
	}
	step := min(max(teamMetricStep, end.Sub(start)/teamMetricPoints).Truncate(time.Second), end.Sub(start))
	spans, err := a.cfg.Activity.SandboxSpans(r.Context(), c.team.ID, start.Add(-step), end)
	if err != nil {
		return nil, err
	}
	return sampleSpans(spans, start, end, step), nil
}

// sampleSpans gives, at each step after start and at end, the sandboxes alive then and the
// starts per second since the point before it.
func sampleSpans(spans []store.Span, start, end time.Time, step time.Duration) []teamMetric {
	out := []teamMetric{}
	prev := start
	for prev.Before(end) {
		t := prev.Add(step)
		if t.After(end) || end.Sub(t) < time.Second {
			t = end
		}
		alive, started := 0, 0
		for _, s := range spans {
			if !s.Started.After(t) && (s.Killed.IsZero() || s.Killed.After(t)) {
				alive++
			}
			if s.Started.After(prev) && !s.Started.After(t) {
				started++
			}
		}
		out = append(out, teamMetric{
			Timestamp: t.UTC().Format(time.RFC3339), TimestampUnix: t.Unix(),
			ConcurrentSandboxes: alive, SandboxStartRate: float64(started) / t.Sub(prev).Seconds(),
		})
		prev = t
	}
	return out
}

// unixParam reads a unix-seconds query parameter, def when absent.
func unixParam(r *http.Request, name string, def time.Time) (time.Time, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return time.Time{}, fmt.Errorf("%w: %s %q is not unix seconds", errBadRequest, name, v)
	}
	return time.Unix(n, 0), nil
}
