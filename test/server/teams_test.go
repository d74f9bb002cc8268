package server

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/covetest"
	cove "github.com/cove-dev/cove/sdk"
)

// TestTeamsAndTeamMetrics drives E2B's /teams and /teams/{teamID}/metrics[/max] against a
// real server: the series is read from the sandbox records, so it counts what happened.
func TestTeamsAndTeamMetrics(t *testing.T) {
	s := covetest.Start(t, "")
	c := client{t: t, url: s.URL, key: s.Key}
	start := time.Now().Add(-time.Minute).Unix()
	c.create(nil)
	b := c.create(nil)
	if code, out, _ := c.do(http.MethodDelete, "/sandboxes/"+b, nil); code != http.StatusNoContent {
		t.Fatalf("kill %s: %d %v", b, code, out)
	}

	var teams []map[string]any
	if code := getJSON(t, s, "/teams", &teams); code != http.StatusOK {
		t.Fatalf("GET /teams: %d", code)
	}
	if len(teams) != 1 || teams[0]["apiKey"] != s.Key || teams[0]["isDefault"] != true || teams[0]["teamID"] == "" {
		t.Fatalf("GET /teams = %v, want the caller's one team with its key", teams)
	}
	team := teams[0]["teamID"].(string)

	t.Run("the series counts the sandbox alive now and both starts", func(t *testing.T) {
		end := time.Now().Add(time.Second).Unix()
		path := fmt.Sprintf("/teams/%s/metrics?start=%d&end=%d", team, start, end)
		var series []map[string]any
		if code := getJSON(t, s, path, &series); code != http.StatusOK {
			t.Fatalf("GET %s: %d", path, code)
		}
		if len(series) == 0 {
			t.Fatal("empty series")
		}
		last := series[len(series)-1]
		if last["concurrentSandboxes"] != float64(1) {
			t.Errorf("concurrent sandboxes at the end = %v, want 1 (one killed, one alive)", last["concurrentSandboxes"])
		}
		starts := 0.0
		for i, p := range series {
			prev := float64(start)
			if i > 0 {
				prev = series[i-1]["timestampUnix"].(float64)
			}
			step := p["timestampUnix"].(float64) - prev
			starts += p["sandboxStartRate"].(float64) * step
		}
		if starts < 1.99 || starts > 2.01 {
			t.Errorf("starts in the window = %v, want 2", starts)
		}
	})
	t.Run("max of concurrent sandboxes is at least the one alive", func(t *testing.T) {
		path := fmt.Sprintf("/teams/%s/metrics/max?metric=concurrent_sandboxes&start=%d", team, start)
		var m map[string]any
		if code := getJSON(t, s, path, &m); code != http.StatusOK {
			t.Fatalf("GET %s: %d", path, code)
		}
		if v, _ := m["value"].(float64); v < 1 || m["timestampUnix"] == nil {
			t.Fatalf("max = %v", m)
		}
	})
	t.Run("the Go SDK reads the same team and series", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		sdk := cove.NewClient(cove.Config{APIURL: s.URL, APIKey: s.Key})
		teams, err := sdk.Teams(ctx)
		if err != nil || len(teams) != 1 || teams[0].ID != team {
			t.Fatalf("Teams = %v, %v; want team %s", teams, err, team)
		}
		series, err := sdk.TeamMetrics(ctx, team, time.Unix(start, 0), time.Now().Add(time.Second))
		if err != nil || len(series) == 0 || series[len(series)-1].ConcurrentSandboxes != 1 {
			t.Fatalf("TeamMetrics = %v, %v; want one alive at the end", series, err)
		}
		m, err := sdk.TeamMetricMax(ctx, team, cove.MetricSandboxStartRate, time.Unix(start, 0), time.Time{})
		if err != nil || m.Value <= 0 {
			t.Fatalf("TeamMetricMax = %v, %v; want a positive start rate", m, err)
		}
		if _, err := sdk.TeamMetrics(ctx, "team_other", time.Time{}, time.Time{}); err == nil {
			t.Fatal("another team's metrics: no error")
		}
	})
	t.Run("cove usage prints the team and the sandboxes alive", func(t *testing.T) {
		cmd := exec.Command(covetest.Binary(t), "usage", "--since", "2m")
		cmd.Env = append(os.Environ(), "COVE_API_URL="+s.URL, "COVE_API_KEY="+s.Key)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("cove usage: %v\n%s", err, out)
		}
		for _, want := range []string{team, "sandboxes alive now: 1", "at most "} {
			if !strings.Contains(string(out), want) {
				t.Errorf("cove usage printed %q, want %q in it", out, want)
			}
		}
	})
	for _, tt := range []struct{ name, path, want string }{
		{"another team's metrics are forbidden", "/teams/team_other/metrics", "403"},
		{"an unknown metric is a 400 naming metric", "/teams/" + team + "/metrics/max?metric=cpu", "400 metric"},
		{"a start that is not unix seconds is a 400 naming start", "/teams/" + team + "/metrics?start=yesterday", "400 start"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, out, _ := c.do(http.MethodGet, tt.path, nil)
			want := strings.Fields(tt.want)
			if fmt.Sprint(code) != want[0] {
				t.Fatalf("%s: %d %v", tt.path, code, out)
			}
			if len(want) > 1 && !strings.Contains(fmt.Sprint(out["message"]), want[1]) {
				t.Fatalf("%s: message %v does not name %s", tt.path, out["message"], want[1])
			}
		})
	}
}
