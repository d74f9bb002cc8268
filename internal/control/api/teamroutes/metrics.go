package teamroutes

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cove-dev/cove/internal/httpx"
	"github.com/cove-dev/cove/internal/store"
	cove "github.com/cove-dev/cove/sdk"
)

// maxSandboxIDs bounds one GET /sandboxes/metrics.
const maxSandboxIDs = 100

type metricAPI struct{ cfg Config }

// metricRoutes are E2B's metrics routes on cfg.Metrics:
//
//	GET /sandboxes/{id}/metrics?start&end     the sandbox's samples, oldest first
//	GET /sandboxes/metrics?sandbox_ids=a,b    {"sandboxes": {id: newest sample}}
//
// start and end are unix seconds, both inclusive and optional. sandbox_ids is
// comma-separated or repeated, 1 to 100 ids; ids the team does not own, or without
// samples, are left out. A sample is E2B's SandboxMetric plus netRxBytes, netTxBytes,
// netRxPackets and netTxPackets, counters since the sandbox started.
func metricRoutes(cfg Config) []httpx.Route {
	a := &metricAPI{cfg: cfg}
	return []httpx.Route{
		route("GET /sandboxes/{id}/metrics", a.sandboxMetrics),
		route("GET /sandboxes/metrics", a.latestMetrics),
	}
}

// wireMetric is E2B's SandboxMetric, with Cove's network counters: the SDK's type.
type wireMetric = cove.Metric

func toWireMetric(s store.MetricSample) wireMetric {
	t := s.Time.UTC().Truncate(time.Second)
	return wireMetric{
		Timestamp: t, TimestampUnix: t.Unix(),
		CPUCount: s.CPUCount, CPUUsedPct: s.CPUUsedPct,
		MemUsed: int64(s.MemUsed), MemTotal: int64(s.MemTotal), MemCache: int64(s.MemCache),
		DiskUsed: int64(s.DiskUsed), DiskTotal: int64(s.DiskTotal),
		NetRxBytes: int64(s.NetRxBytes), NetTxBytes: int64(s.NetTxBytes), NetRxPackets: int64(s.NetRxPackets), NetTxPackets: int64(s.NetTxPackets),
	}
}

func (a *metricAPI) sandboxMetrics(w http.ResponseWriter, r *http.Request, teamID string) error {
	id := r.PathValue("id")
	q := r.URL.Query()
	start, err := parseUnix(q.Get("start"), "start")
	if err != nil {
		return err
	}
	end, err := parseUnix(q.Get("end"), "end")
	if err != nil {
		return err
	}
	if !start.IsZero() && !end.IsZero() && end.Before(start) {
		return BadRequest("end %s is before start %s", q.Get("end"), q.Get("start"))
	}
	if !end.IsZero() {
		end = end.Add(time.Second - time.Microsecond) // the whole end second
	}
	if a.cfg.MetricSandbox != nil {
		if err := a.cfg.MetricSandbox(r.Context(), teamID, id); err != nil {
			return fmt.Errorf("sandbox %s: %w", id, err)
		}
	}
	samples, err := a.cfg.Metrics.QuerySamples(r.Context(), id, start, end)
	if err != nil {
		return err
	}
	out := make([]wireMetric, 0, len(samples))
	for _, s := range samples {
		if s.TeamID == teamID {
			out = append(out, toWireMetric(s))
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// parseUnix parses a unix-seconds parameter; "" is the zero time (no bound).
func parseUnix(v, name string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return time.Time{}, BadRequest("%s %q is not a unix time in seconds", name, v)
	}
	return time.Unix(n, 0), nil
}

func (a *metricAPI) latestMetrics(w http.ResponseWriter, r *http.Request, teamID string) error {
	var ids []string
	seen := map[string]bool{}
	for _, v := range r.URL.Query()["sandbox_ids"] {
		for id := range strings.SplitSeq(v, ",") {
			if id = strings.TrimSpace(id); id != "" && !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
		}
	}
	if len(ids) == 0 {
		return BadRequest("sandbox_ids is required: a comma-separated list of sandbox ids")
	}
	if len(ids) > maxSandboxIDs {
		return BadRequest("sandbox_ids has %d ids; at most %d", len(ids), maxSandboxIDs)
	}
	samples, err := a.cfg.Metrics.LatestSamples(r.Context(), teamID, ids)
	if err != nil {
		return err
	}
	out := cove.SandboxesWithMetrics{Sandboxes: make(map[string]wireMetric, len(samples))}
	for _, s := range samples {
		out.Sandboxes[s.SandboxID] = toWireMetric(s)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
