package server

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/cove-dev/cove/internal/covetest"
)

// TestAdminStatusShowsWhatEachStoreKeeps runs a server with an operator's retention for
// events and build logs (a year: the test templates are shared), and reads `cove admin status` and /metrics: every dataset, its TTL and cap, and
// how big it is now.
func TestAdminStatusShowsWhatEachStoreKeeps(t *testing.T) {
	s := covetest.StartWith(t, "", covetest.Options{OnStop: "kill", Args: []string{"--retain", "events=1h:500", "--retain", "build_logs=8760h:1000", "--retain", "template_builds=2h:50"}})
	a := client{t: t, url: s.URL, key: s.Key}
	id := a.create(nil)
	run(t, s, id, "echo kept", "req-retention")
	if code, _, _ := a.do(http.MethodDelete, "/sandboxes/"+id, nil); code != http.StatusNoContent {
		t.Fatalf("kill: %d", code)
	}
	admin := func(args ...string) string {
		cmd := exec.Command(covetest.Binary(t), append([]string{"admin", "status", "--data", s.DataDir, "--api-url", s.URL}, args...)...)
		cmd.Env = os.Environ()
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("cove admin status: %v\n%s", err, out)
		}
		return string(out)
	}
	var st []struct {
		Dataset    string `json:"dataset"`
		TTLSeconds int64  `json:"ttlSeconds"`
		MaxRows    int64  `json:"maxRows"`
		Rows       int64  `json:"rows"`
		Bytes      int64  `json:"bytes"`
	}
	if err := json.Unmarshal([]byte(admin("--json")), &st); err != nil {
		t.Fatal(err)
	}
	t.Run("every dataset is listed with its TTL, cap and size", func(t *testing.T) {
		got := map[string]int{}
		for i, d := range st {
			got[d.Dataset] = i
		}
		ev, builds := st[got["events"]], st[got["template_builds"]]
		if len(st) != 8 || ev.TTLSeconds != 3600 || ev.MaxRows != 500 || ev.Rows < 2 || ev.Bytes <= 0 {
			t.Errorf("status %+v", st)
		}
		if _, ok := got["template_uploads"]; !ok || builds.Dataset != "template_builds" || builds.TTLSeconds != 7200 || builds.MaxRows != 50 {
			t.Errorf("template builds and uploads in %+v", st)
		}
		if i, ok := got["build_logs"]; !ok || st[i].TTLSeconds != 8760*3600 || st[i].MaxRows != 1000 {
			t.Errorf("build_logs: want a TTL of 8760h and a cap of 1000 logs in %+v", st)
		}
		if _, ok := got["log_lines"]; !ok {
			t.Errorf("no log_lines in %+v", st)
		}
	})
	t.Run("the table names each dataset", func(t *testing.T) {
		out := admin()
		for _, w := range []string{"DATASET", "events", "webhook_deliveries", "metric_samples", "command_records", "log_lines", "build_logs", "template_builds", "template_uploads", "1h0m0s"} {
			if !strings.Contains(out, w) {
				t.Errorf("table lacks %q:\n%s", w, out)
			}
		}
	})
	t.Run("/metrics has the gauges", func(t *testing.T) {
		res, err := http.Get(s.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		for _, w := range []string{`cove_store_rows{dataset="events"}`, `cove_store_retention_seconds{dataset="events"} 3600`,
			`cove_store_max_rows{dataset="events"} 500`, `cove_store_bytes{dataset="log_lines"}`, `cove_store_retention_seconds{dataset="build_logs"} 3.1536e+07`} {
			if !strings.Contains(string(b), w) {
				t.Errorf("/metrics lacks %s", w)
			}
		}
	})
	t.Run("without the admin token the route is 401", func(t *testing.T) {
		if code, _, _ := a.do(http.MethodGet, "/admin/status", nil); code != http.StatusUnauthorized {
			t.Errorf("GET /admin/status with an API key: %d", code)
		}
	})
}
