package server

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/covetest"
)

func repoFile(t *testing.T, rel string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", "..", rel))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestAlertRulesPassPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed (Debian package prometheus; scripts/deps.sh installs it)")
	}
	out, err := exec.Command(promtool, "check", "rules", repoFile(t, "deploy/prometheus/cove-alerts.yml")).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
}

// dashboard is the part of the Grafana dashboard JSON this test reads.
type dashboard struct {
	Panels []struct {
		Title       string `json:"title"`
		Description string `json:"description"`
		Targets     []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

type promResult struct {
	Status string `json:"status"`
	Error  string `json:"error"`
	Data   struct {
		Result []json.RawMessage `json:"result"`
	} `json:"data"`
}

func TestDashboardQueriesRunOnARealPrometheus(t *testing.T) {
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("prometheus not installed (Debian package prometheus; scripts/deps.sh installs it)")
	}
	raw, err := os.ReadFile(repoFile(t, "deploy/grafana/cove-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	if len(d.Panels) == 0 {
		t.Fatal("the dashboard has no panels")
	}

	s := covetest.Start(t, "")
	a := client{t: t, url: s.URL, key: s.Key}
	id := a.create(nil)
	a.do(http.MethodDelete, "/sandboxes/"+id, nil)
	a.create(nil)

	target := strings.TrimPrefix(s.URL, "http://")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "prometheus.yml")
	conf := fmt.Sprintf("global: {scrape_interval: 1s, evaluation_interval: 1s}\nrule_files: [%q]\nscrape_configs:\n  - job_name: cove\n    static_configs: [{targets: [%q]}]\n",
		repoFile(t, "deploy/prometheus/cove-alerts.yml"), target)
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var logs strings.Builder
	cmd := exec.Command(bin, "--config.file="+cfg, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	query := func(expr string) (promResult, error) {
		var r promResult
		res, err := http.Get("http://" + addr + "/api/v1/query?query=" + url.QueryEscape(expr))
		if err != nil {
			return r, err
		}
		defer res.Body.Close()
		return r, json.NewDecoder(res.Body).Decode(&r)
	}
	// Wait for a few scrapes, so rate() has two points to work with.
	deadline := time.Now().Add(60 * time.Second)
	for {
		r, err := query(`count_over_time(up{job="cove"}[5m]) >= 3`)
		if err == nil && len(r.Data.Result) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus did not scrape cove 3 times in 60 s (%v); its log:\n%s", err, logs.String())
		}
		time.Sleep(250 * time.Millisecond)
	}
	for _, p := range d.Panels {
		t.Run("panel "+p.Title+" parses and has data when data is expected", func(t *testing.T) {
			if len(p.Targets) == 0 {
				t.Fatal("panel has no query")
			}
			for _, tg := range p.Targets {
				r, err := query(tg.Expr)
				if err != nil || r.Status != "success" {
					t.Fatalf("%s: %v %s %s", tg.Expr, err, r.Status, r.Error)
				}
				if strings.HasPrefix(p.Description, "expects data") && len(r.Data.Result) == 0 {
					t.Errorf("%s: no series", tg.Expr)
				}
			}
		})
	}
}
