package api_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/cove-dev/cove/internal/telemetry"
)

func TestAPIRequestCounter(t *testing.T) {
	e := newEnv(t, "")
	tests := []struct {
		name, path, route, code string
	}{
		{"a 404 for an unknown sandbox counts under its route and 4xx", "/sandboxes/inope", "GET /sandboxes/{id}", "4xx"},
		{"a found sandbox counts under its route and 2xx", "/sandboxes/irunning", "GET /sandboxes/{id}", "2xx"},
		{"an unknown path counts under the catch-all route, not its own path", "/no/such/route", "/", "4xx"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := telemetry.APIRequests.WithLabelValues(tc.route, tc.code)
			before := counterValue(t, c)
			e.do(t, "GET", tc.path, "")
			if got := counterValue(t, c) - before; got < 1 {
				t.Errorf("cove_api_requests_total{route=%q,code=%q} grew by %v, want at least 1", tc.route, tc.code, got)
			}
		})
	}
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
