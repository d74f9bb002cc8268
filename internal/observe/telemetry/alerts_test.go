package telemetry

import (
	"os"
	"regexp"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestAlertRulesNameRegisteredMetrics checks that every cove_ metric the shipped
// Prometheus alert rules use is one the server registers (and so serves on /metrics once
// it has a value): a renamed metric must not leave an alert that can never fire.
func TestAlertRulesNameRegisteredMetrics(t *testing.T) {
	rules, err := os.ReadFile("../../../deploy/prometheus/cove-alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	registered := map[string]bool{}
	ch := make(chan *prometheus.Desc)
	go func() {
		Metrics().Describe(ch)
		close(ch)
	}()
	name := regexp.MustCompile(`fqName: "([^"]+)"`)
	for d := range ch {
		if m := name.FindStringSubmatch(d.String()); m != nil {
			registered[m[1]] = true
		}
	}
	used := regexp.MustCompile(`\bcove_[a-z_]+`).FindAllString(string(rules), -1)
	if len(used) == 0 {
		t.Fatal("the alert rules use no cove_ metric")
	}
	for _, u := range used {
		t.Run(u+" is registered", func(t *testing.T) {
			base := regexp.MustCompile(`_(bucket|sum|count)$`).ReplaceAllString(u, "")
			if !registered[u] && !registered[base] {
				t.Errorf("%s is not a registered metric", u)
			}
		})
	}
}

func TestDiskSpaceIsReported(t *testing.T) {
	WatchDisk("test", t.TempDir())
	fams, err := Metrics().Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "dir" && l.GetValue() == "test" {
					got[f.GetName()] = m.GetGauge().GetValue()
				}
			}
		}
	}
	if got["cove_disk_size_bytes"] <= 0 || got["cove_disk_free_bytes"] <= 0 || got["cove_disk_free_bytes"] > got["cove_disk_size_bytes"] {
		t.Errorf("disk metrics of a temp dir: %v", got)
	}
}
