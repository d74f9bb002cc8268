package telemetry_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cove-dev/cove/internal/observe/telemetry"
)

func TestWithNode(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cove_test_total", Help: "a test counter"}, []string{"kind"})
	reg.MustRegister(c)
	c.WithLabelValues("x").Inc()
	mfs, err := telemetry.WithNode(reg, "node-a").Gather()
	if err != nil || len(mfs) != 1 {
		t.Fatalf("gather: %v %v", mfs, err)
	}
	got := map[string]string{}
	for _, l := range mfs[0].Metric[0].Label {
		got[l.GetName()] = l.GetValue()
	}
	if got["node"] != "node-a" || got["kind"] != "x" {
		t.Fatalf("labels %v, want node=node-a beside kind=x", got)
	}
	if telemetry.WithNode(reg, "") != prometheus.Gatherer(reg) {
		t.Error("a lone server's gatherer was wrapped")
	}
}
