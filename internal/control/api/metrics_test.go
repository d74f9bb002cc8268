package api_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/cove-dev/cove/internal/control/api"
	"github.com/cove-dev/cove/internal/observe/telemetry"
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

// teamRegistry is a registry with one series per team, as cove_snapshot_disk_bytes has, and
// one without a team.
func teamRegistry(t *testing.T) *prometheus.Registry {
	t.Helper()
	reg := prometheus.NewRegistry()
	disk := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "cove_test_disk_bytes", Help: "by team"}, []string{"team", "kind"})
	disk.WithLabelValues(testTeam, "paused").Set(100)
	disk.WithLabelValues(otherTeam, "paused").Set(20)
	disk.WithLabelValues(otherTeam, "snapshot").Set(3)
	up := prometheus.NewGauge(prometheus.GaugeOpts{Name: "cove_test_up", Help: "no team"})
	up.Set(1)
	reg.MustRegister(disk, up)
	return reg
}

func TestMetricsShowTeamsOnlyToThoseWhoMaySeeThem(t *testing.T) {
	const admin = "cove_admin_test"
	srv := httptest.NewServer(api.MetricsHandler(api.MetricsConfig{Gatherer: teamRegistry(t), Keys: fakeKeys{}, AdminToken: admin}))
	t.Cleanup(srv.Close)
	tests := []struct {
		name       string
		header     []string
		status     int
		want, deny []string
	}{
		{name: "without a credential no team id shows, and the series are summed over teams", status: 200,
			want: []string{`cove_test_disk_bytes{kind="paused"} 120`, `cove_test_disk_bytes{kind="snapshot"} 3`, "cove_test_up 1"},
			deny: []string{testTeam, otherTeam, "team="}},
		{name: "an API key sees its own team's series and no other team's", header: []string{"X-API-Key", testKey}, status: 200,
			want: []string{`cove_test_disk_bytes{kind="paused",team="` + testTeam + `"} 100`, "cove_test_up 1"},
			deny: []string{otherTeam}},
		{name: "a Bearer API key is an API key", header: []string{"Authorization", "Bearer " + otherKey}, status: 200,
			want: []string{`cove_test_disk_bytes{kind="snapshot",team="` + otherTeam + `"} 3`}, deny: []string{testTeam}},
		{name: "the admin token sees every team", header: []string{api.HeaderAdminToken, admin}, status: 200,
			want: []string{`team="` + testTeam + `"`, `team="` + otherTeam + `"`}},
		{name: "a wrong API key is 401", header: []string{"X-API-Key", "e2b_wrong"}, status: 401, deny: []string{"team="}},
		{name: "a wrong admin token is 401", header: []string{api.HeaderAdminToken, "nope"}, status: 401, deny: []string{"team="}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest("GET", srv.URL+"/metrics", nil)
			for i := 0; i+1 < len(tt.header); i += 2 {
				req.Header.Set(tt.header[i], tt.header[i+1])
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			b, _ := io.ReadAll(res.Body)
			if res.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", res.StatusCode, tt.status, b)
			}
			for _, w := range tt.want {
				if !strings.Contains(string(b), w) {
					t.Errorf("/metrics lacks %q:\n%s", w, b)
				}
			}
			for _, d := range tt.deny {
				if strings.Contains(string(b), d) {
					t.Errorf("/metrics shows %q:\n%s", d, b)
				}
			}
		})
	}
}
