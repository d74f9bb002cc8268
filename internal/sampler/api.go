package sampler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/telemetry"
)

// maxSandboxIDs bounds one GET /sandboxes/metrics.
const maxSandboxIDs = 100

// Errors of the HTTP API, mapped to statuses by statusOf.
var (
	errBadRequest   = errors.New("bad request")
	errUnauthorized = errors.New("unauthorized")
)

func badRequest(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errBadRequest, fmt.Sprintf(format, args...))
}

// APIConfig is what NewAPI needs.
type APIConfig struct {
	Store store.MetricStore
	// Team returns the authenticated caller's team; the API answers 401 when ok is false.
	Team func(ctx context.Context) (teamID string, ok bool)
	// Sandbox returns nil when team teamID may read sandbox id's metrics, killed sandboxes
	// included. An error wrapping store.ErrNotFound answers 404 (also for another team's
	// sandbox); any other error answers 500.
	Sandbox func(ctx context.Context, teamID, id string) error
}

type api struct {
	cfg APIConfig
	mux *http.ServeMux
}

// NewAPI returns E2B's metrics API on cfg.Store (run it behind the API's authentication):
//
//	GET /sandboxes/{id}/metrics?start&end     the sandbox's samples, oldest first
//	GET /sandboxes/metrics?sandbox_ids=a,b    {"sandboxes": {id: newest sample}}
//
// start and end are unix seconds, both inclusive and optional. sandbox_ids is
// comma-separated or repeated, 1 to 100 ids; ids the team does not own, or without
// samples, are left out. A sample is E2B's SandboxMetric plus netRxBytes, netTxBytes,
// netRxPackets and netTxPackets, counters since the sandbox started.
func NewAPI(cfg APIConfig) http.Handler {
	a := &api{cfg: cfg, mux: http.NewServeMux()}
	a.handle("GET /sandboxes/{id}/metrics", a.sandboxMetrics)
	a.handle("GET /sandboxes/metrics", a.latestMetrics)
	return a
}

func (a *api) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Behind Cove's API the request id is in the context already; standalone, take the
	// client's or mint one, the same way.
	if telemetry.RequestID(r.Context()) == "" {
		telemetry.RequestIDMiddleware(a.mux).ServeHTTP(w, r)
		return
	}
	a.mux.ServeHTTP(w, r)
}

type handlerFunc func(w http.ResponseWriter, r *http.Request, teamID string) error

func (a *api) handle(pattern string, h handlerFunc) {
	a.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		var team string
		ok := false
		if a.cfg.Team != nil {
			team, ok = a.cfg.Team(r.Context())
		}
		var err error
		if !ok || team == "" {
			err = fmt.Errorf("%w: no team for this request", errUnauthorized)
		} else {
			err = h(w, r, team)
		}
		if err != nil {
			a.fail(w, r, err)
		}
	})
}

func statusOf(err error) int {
	switch {
	case errors.Is(err, errBadRequest):
		return http.StatusBadRequest
	case errors.Is(err, errUnauthorized):
		return http.StatusUnauthorized
	case errors.Is(err, store.ErrNotFound):
		return http.StatusNotFound
	default:
		return http.StatusInternalServerError
	}
}

// errorBody is E2B's error shape, with the request id.
type errorBody struct {
	Code      int    `json:"code"`
	Message   string `json:"message"`
	RequestID string `json:"requestId"`
}

func (a *api) fail(w http.ResponseWriter, r *http.Request, err error) {
	ctx := r.Context()
	code := statusOf(err)
	id := telemetry.RequestID(ctx)
	msg := err.Error()
	if id != "" && !strings.Contains(msg, id) {
		msg += " (request id " + id + ")"
	}
	if code >= 500 {
		telemetry.Logger(ctx).Error("metrics api", "http.route", r.Pattern, "error", err)
	}
	writeJSON(w, code, errorBody{Code: code, Message: msg, RequestID: id})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

// wireMetric is E2B's SandboxMetric, with Cove's network counters.
type wireMetric struct {
	Timestamp     string  `json:"timestamp"` // RFC 3339; deprecated by E2B for timestampUnix
	TimestampUnix int64   `json:"timestampUnix"`
	CPUCount      int     `json:"cpuCount"`
	CPUUsedPct    float64 `json:"cpuUsedPct"`
	MemUsed       uint64  `json:"memUsed"`
	MemTotal      uint64  `json:"memTotal"`
	MemCache      uint64  `json:"memCache"`
	DiskUsed      uint64  `json:"diskUsed"`
	DiskTotal     uint64  `json:"diskTotal"`
	NetRxBytes    uint64  `json:"netRxBytes"`
	NetTxBytes    uint64  `json:"netTxBytes"`
	NetRxPackets  uint64  `json:"netRxPackets"`
	NetTxPackets  uint64  `json:"netTxPackets"`
}

func toWire(s store.MetricSample) wireMetric {
	t := s.Time.UTC().Truncate(time.Second)
	return wireMetric{
		Timestamp: t.Format(time.RFC3339), TimestampUnix: t.Unix(),
		CPUCount: s.CPUCount, CPUUsedPct: s.CPUUsedPct,
		MemUsed: s.MemUsed, MemTotal: s.MemTotal, MemCache: s.MemCache,
		DiskUsed: s.DiskUsed, DiskTotal: s.DiskTotal,
		NetRxBytes: s.NetRxBytes, NetTxBytes: s.NetTxBytes, NetRxPackets: s.NetRxPackets, NetTxPackets: s.NetTxPackets,
	}
}

func (a *api) sandboxMetrics(w http.ResponseWriter, r *http.Request, teamID string) error {
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
		return badRequest("end %s is before start %s", q.Get("end"), q.Get("start"))
	}
	if !end.IsZero() {
		end = end.Add(time.Second - time.Microsecond) // the whole end second
	}
	if a.cfg.Sandbox != nil {
		if err := a.cfg.Sandbox(r.Context(), teamID, id); err != nil {
			return fmt.Errorf("sandbox %s: %w", id, err)
		}
	}
	samples, err := a.cfg.Store.QuerySamples(r.Context(), id, start, end)
	if err != nil {
		return err
	}
	out := make([]wireMetric, 0, len(samples))
	for _, s := range samples {
		if s.TeamID == teamID {
			out = append(out, toWire(s))
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
		return time.Time{}, badRequest("%s %q is not a unix time in seconds", name, v)
	}
	return time.Unix(n, 0), nil
}

func (a *api) latestMetrics(w http.ResponseWriter, r *http.Request, teamID string) error {
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
		return badRequest("sandbox_ids is required: a comma-separated list of sandbox ids")
	}
	if len(ids) > maxSandboxIDs {
		return badRequest("sandbox_ids has %d ids; at most %d", len(ids), maxSandboxIDs)
	}
	samples, err := a.cfg.Store.LatestSamples(r.Context(), teamID, ids)
	if err != nil {
		return err
	}
	out := struct {
		Sandboxes map[string]wireMetric `json:"sandboxes"`
	}{Sandboxes: make(map[string]wireMetric, len(samples))}
	for _, s := range samples {
		out.Sandboxes[s.SandboxID] = toWire(s)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
