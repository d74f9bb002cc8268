package api

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"

	"github.com/cove-dev/cove/internal/httpx"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/store"
)

// teamLabel names the team a series is about; which team ids exist is each team's business.
const teamLabel = "team"

// MetricsConfig is what MetricsHandler needs.
type MetricsConfig struct {
	Gatherer   prometheus.Gatherer
	Keys       Authenticator
	AdminToken string
	// Logger is the edge's base logger; nil uses the one in each request's context.
	Logger *slog.Logger
}

// MetricsHandler serves GET /metrics in Prometheus' format, through the one chain
// (httpx.Chain). Series with a team label show a team id, so who sees them depends on the
// caller: the admin token (X-Admin-Token) sees every series; an API key (X-API-Key or a
// Bearer) sees its own team's and no other team's; a caller without either gets every such
// series summed over the teams, without the team label. A credential that is wrong is 401,
// not the anonymous view.
func MetricsHandler(cfg MetricsConfig) http.Handler {
	chain := httpx.Chain{Edge: "metrics", Logger: cfg.Logger, Authenticate: func(r *http.Request, _ httpx.Auth) (context.Context, error) {
		scope, err := metricsScope(r, cfg)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errUnauthorized, err)
		}
		if scope.team != "" {
			httpx.NoteFrom(r.Context()).Add(telemetry.KeyTeamID, scope.team)
		}
		return context.WithValue(r.Context(), scopeKey{}, scope), nil
	}}
	return chain.Routes([]httpx.Route{{Pattern: "GET /metrics", Auth: httpx.AuthOptional, Handler: func(w http.ResponseWriter, r *http.Request) error {
		scope, _ := r.Context().Value(scopeKey{}).(teamScope)
		g := prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
			mfs, err := cfg.Gatherer.Gather()
			return scope.apply(mfs), err
		})
		promhttp.HandlerFor(g, promhttp.HandlerOpts{}).ServeHTTP(w, r)
		return nil
	}}})
}

type scopeKey struct{}

// teamScope is whose team series a caller sees: all, one team's, or none but their sums.
type teamScope struct {
	all  bool
	team string // "" with all false: the sums over teams only
}

// metricsScope reads the caller's credential.
func metricsScope(r *http.Request, cfg MetricsConfig) (teamScope, error) {
	if got := r.Header.Get(HeaderAdminToken); got != "" {
		if cfg.AdminToken == "" || subtle.ConstantTimeCompare([]byte(got), []byte(cfg.AdminToken)) != 1 {
			return teamScope{}, fmt.Errorf("metrics: invalid %s", HeaderAdminToken)
		}
		return teamScope{all: true}, nil
	}
	key := apiKeyFrom(r)
	if key == "" {
		return teamScope{}, nil
	}
	if cfg.Keys == nil {
		return teamScope{}, errors.New("metrics: this server has no key store")
	}
	_, team, err := cfg.Keys.Authenticate(r.Context(), key)
	switch {
	case errors.Is(err, store.ErrNotFound), err == nil && team == nil:
		return teamScope{}, errors.New("metrics: invalid or revoked API key")
	case err != nil:
		return teamScope{}, fmt.Errorf("metrics: authenticate API key: %w", err)
	}
	return teamScope{team: team.ID}, nil
}

// apply keeps the series s may see: a team's own, or the sums over teams.
func (s teamScope) apply(mfs []*dto.MetricFamily) []*dto.MetricFamily {
	if s.all {
		return mfs
	}
	out := mfs[:0]
	for _, mf := range mfs {
		if s.team != "" {
			mf.Metric = ownTeam(mf.Metric, s.team)
		} else {
			mf.Metric = sumOverTeams(mf.GetType(), mf.Metric)
		}
		if len(mf.Metric) > 0 {
			out = append(out, mf)
		}
	}
	return out
}

// teamOf returns a series' team label value, and whether it has one.
func teamOf(m *dto.Metric) (string, bool) {
	for _, l := range m.GetLabel() {
		if l.GetName() == teamLabel {
			return l.GetValue(), true
		}
	}
	return "", false
}

// ownTeam keeps the series without a team label and team's own.
func ownTeam(ms []*dto.Metric, team string) []*dto.Metric {
	out := ms[:0]
	for _, m := range ms {
		if t, ok := teamOf(m); !ok || t == team {
			out = append(out, m)
		}
	}
	return out
}

// sumOverTeams replaces the series with a team label by their sums over teams (by the other
// labels). A summary's quantiles cannot be summed: its sum keeps only count and sum.
func sumOverTeams(typ dto.MetricType, ms []*dto.Metric) []*dto.Metric {
	out := ms[:0:0]
	sums := map[string]*dto.Metric{}
	var order []string
	for _, m := range ms {
		if _, ok := teamOf(m); !ok {
			out = append(out, m)
			continue
		}
		var labels []*dto.LabelPair
		var key strings.Builder
		for _, l := range m.GetLabel() {
			if l.GetName() != teamLabel {
				labels = append(labels, l)
				key.WriteString(l.GetName() + "\x00" + l.GetValue() + "\x00")
			}
		}
		sum, ok := sums[key.String()]
		if !ok {
			sum = &dto.Metric{Label: labels}
			sums[key.String()] = sum
			order = append(order, key.String())
		}
		add(typ, sum, m)
	}
	sort.Strings(order)
	for _, k := range order {
		out = append(out, sums[k])
	}
	return out
}

// add adds m's value into sum, a series of the same type.
func add(typ dto.MetricType, sum, m *dto.Metric) {
	switch typ {
	case dto.MetricType_COUNTER:
		sum.Counter = &dto.Counter{Value: proto.Float64(sum.GetCounter().GetValue() + m.GetCounter().GetValue())}
	case dto.MetricType_GAUGE:
		sum.Gauge = &dto.Gauge{Value: proto.Float64(sum.GetGauge().GetValue() + m.GetGauge().GetValue())}
	case dto.MetricType_UNTYPED:
		sum.Untyped = &dto.Untyped{Value: proto.Float64(sum.GetUntyped().GetValue() + m.GetUntyped().GetValue())}
	case dto.MetricType_SUMMARY:
		sum.Summary = &dto.Summary{
			SampleCount: proto.Uint64(sum.GetSummary().GetSampleCount() + m.GetSummary().GetSampleCount()),
			SampleSum:   proto.Float64(sum.GetSummary().GetSampleSum() + m.GetSummary().GetSampleSum()),
		}
	case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
		h := m.GetHistogram()
		if sum.Histogram == nil {
			sum.Histogram = &dto.Histogram{}
			for _, b := range h.GetBucket() {
				sum.Histogram.Bucket = append(sum.Histogram.Bucket, &dto.Bucket{UpperBound: proto.Float64(b.GetUpperBound()), CumulativeCount: proto.Uint64(0)})
			}
		}
		s := sum.Histogram
		s.SampleCount = proto.Uint64(s.GetSampleCount() + h.GetSampleCount())
		s.SampleSum = proto.Float64(s.GetSampleSum() + h.GetSampleSum())
		for i, b := range h.GetBucket() {
			if i < len(s.Bucket) {
				s.Bucket[i].CumulativeCount = proto.Uint64(s.Bucket[i].GetCumulativeCount() + b.GetCumulativeCount())
			}
		}
	}
}
