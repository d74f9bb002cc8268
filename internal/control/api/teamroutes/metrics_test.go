package teamroutes

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/store/sqlite"
	cove "github.com/cove-dev/cove/sdk"
)

// newAPI serves the API on a real SQLite store holding samples of sb1 (team-a, every 5 s
// from t0), sb2 (team-a) and sb3 (team-b). The caller's team comes from X-Team.
func newAPI(t *testing.T) (http.Handler, time.Time) {
	t.Helper()
	ctx := context.Background()
	db, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "cove.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	t0 := time.Unix(1_772_366_400, 250_000_000) // 2026-03-01T12:00:00.25Z
	var samples []store.MetricSample
	for i := range 4 {
		samples = append(samples, store.MetricSample{SandboxID: "sb1", TeamID: "team-a",
			Time: t0.Add(time.Duration(i) * 5 * time.Second), CPUCount: 2, CPUUsedPct: 12.5 * float64(i),
			MemUsed: 10 << 20, MemTotal: 512 << 20, MemCache: 3 << 20, DiskUsed: 20 << 20, DiskTotal: 1 << 30,
			NetRxBytes: uint64(100 * i), NetTxBytes: uint64(90 * i), NetRxPackets: uint64(i), NetTxPackets: uint64(i)})
	}
	samples = append(samples,
		store.MetricSample{SandboxID: "sb2", TeamID: "team-a", Time: t0, CPUCount: 1},
		store.MetricSample{SandboxID: "sb3", TeamID: "team-b", Time: t0, CPUCount: 4})
	if err := db.InsertSamples(ctx, samples); err != nil {
		t.Fatal(err)
	}
	owners := map[string]string{"sb1": "team-a", "sb2": "team-a", "sb3": "team-b"}
	h := serve(Config{
		Metrics: db,
		MetricSandbox: func(ctx context.Context, teamID, id string) error {
			if owners[id] != teamID {
				return fmt.Errorf("%w: sandbox %s", store.ErrNotFound, id)
			}
			return nil
		},
	})
	return h, t0
}

func get(t *testing.T, h http.Handler, team, target string) (int, string) {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, target, nil)
	if team != "" {
		r.Header.Set("X-Team", team)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code, w.Body.String()
}

func TestMetricRoutes(t *testing.T) {
	t.Parallel()
	h, t0 := newAPI(t)
	sec := t0.Unix()

	t.Run("a sandbox's metrics are E2B's SandboxMetric list with network fields", func(t *testing.T) {
		code, body := get(t, h, "team-a", "/sandboxes/sb1/metrics")
		if code != http.StatusOK {
			t.Fatalf("status %d: %s", code, body)
		}
		var got []map[string]any
		if err := json.Unmarshal([]byte(body), &got); err != nil || len(got) != 4 {
			t.Fatalf("%d metrics, %v: %s", len(got), err, body)
		}
		want := map[string]any{
			"timestamp": "2026-03-01T12:00:05Z", "timestampUnix": float64(sec + 5),
			"cpuCount": 2.0, "cpuUsedPct": 12.5, "memUsed": float64(10 << 20), "memTotal": float64(512 << 20),
			"memCache": float64(3 << 20), "diskUsed": float64(20 << 20), "diskTotal": float64(1 << 30),
			"netRxBytes": 100.0, "netTxBytes": 90.0, "netRxPackets": 1.0, "netTxPackets": 1.0,
		}
		if !reflect.DeepEqual(got[1], want) {
			t.Errorf("second metric\n got %v\nwant %v", got[1], want)
		}
	})

	t.Run("start and end select whole seconds, both inclusive", func(t *testing.T) {
		code, body := get(t, h, "team-a", fmt.Sprintf("/sandboxes/sb1/metrics?start=%d&end=%d", sec+5, sec+10))
		var got []struct{ TimestampUnix int64 }
		json.Unmarshal([]byte(body), &got)
		if code != http.StatusOK || len(got) != 2 || got[0].TimestampUnix != sec+5 || got[1].TimestampUnix != sec+10 {
			t.Errorf("status %d: %s", code, body)
		}
	})

	t.Run("a sandbox without samples has an empty list", func(t *testing.T) {
		if code, body := get(t, h, "team-a", "/sandboxes/sb2/metrics?start=1"); code != http.StatusOK || strings.TrimSpace(body) == "null" {
			t.Errorf("status %d: %s", code, body)
		}
		if code, body := get(t, h, "team-a", fmt.Sprintf("/sandboxes/sb2/metrics?start=%d", sec+1)); code != http.StatusOK || strings.TrimSpace(body) != "[]" {
			t.Errorf("status %d: %s", code, body)
		}
	})

	t.Run("latest metrics map each asked sandbox of the team to its newest sample", func(t *testing.T) {
		code, body := get(t, h, "team-a", "/sandboxes/metrics?sandbox_ids=sb1,sb3&sandbox_ids=sb2,nope")
		var got struct {
			Sandboxes map[string]struct {
				TimestampUnix int64
				CPUCount      int
			}
		}
		if err := json.Unmarshal([]byte(body), &got); err != nil || code != http.StatusOK {
			t.Fatalf("status %d, %v: %s", code, err, body)
		}
		if len(got.Sandboxes) != 2 || got.Sandboxes["sb1"].TimestampUnix != sec+15 || got.Sandboxes["sb2"].CPUCount != 1 {
			t.Errorf("got %+v", got.Sandboxes)
		}
	})

	errorCases := []struct {
		name, team, target string
		code               int
	}{
		{"another team's sandbox is not found", "team-b", "/sandboxes/sb1/metrics", 404},
		{"a call without a team is unauthorized", "", "/sandboxes/sb1/metrics", 401},
		{"a start that is not unix seconds is a bad request", "team-a", "/sandboxes/sb1/metrics?start=2026-03-01", 400},
		{"an end before the start is a bad request", "team-a", "/sandboxes/sb1/metrics?start=10&end=9", 400},
		{"latest metrics without ids is a bad request", "team-a", "/sandboxes/metrics", 400},
		{"latest metrics for over 100 ids is a bad request", "team-a", "/sandboxes/metrics?sandbox_ids=" + manyIDs(101), 400},
	}
	for _, tc := range errorCases {
		t.Run(tc.name, func(t *testing.T) {
			code, body := get(t, h, tc.team, tc.target)
			var e cove.ErrorBody
			if err := json.Unmarshal([]byte(body), &e); err != nil || code != tc.code || e.Code != tc.code ||
				e.RequestID == "" || !strings.Contains(e.Message, e.RequestID) {
				t.Errorf("status %d, body %s; want %d with {code,message,requestId}", code, body, tc.code)
			}
		})
	}
}

func manyIDs(n int) string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("sb%d", i)
	}
	return strings.Join(ids, ",")
}
