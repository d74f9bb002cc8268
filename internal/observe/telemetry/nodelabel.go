package telemetry

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// LabelNode is the label every series of a cluster node's /metrics carries: its name.
const LabelNode = "node"

// WithNode returns g with every series labelled node=name, so a cluster's series from
// several nodes stay apart where they are scraped together; g itself when name is "".
func WithNode(g prometheus.Gatherer, name string) prometheus.Gatherer {
	if name == "" {
		return g
	}
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		mfs, err := g.Gather()
		labelName, labelValue := LabelNode, name
		for _, mf := range mfs {
			for _, m := range mf.Metric {
				m.Label = append(m.Label, &dto.LabelPair{Name: &labelName, Value: &labelValue})
			}
		}
		return mfs, err
	})
}
