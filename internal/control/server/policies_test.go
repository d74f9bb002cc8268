package server

import (
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/observe/retention"
	"github.com/cove-dev/cove/internal/store"
)

func TestRetentionPoliciesLayerDefaultsRetentionAndRetain(t *testing.T) {
	cfg := Config{Retention: 48 * time.Hour, Retain: map[store.Dataset]retention.Policy{store.DatasetLogs: {TTL: time.Hour, MaxRows: 10}}}
	pol := policies(cfg)
	tests := []struct {
		name string
		d    store.Dataset
		want retention.Policy
	}{
		{"--retention sets command records' TTL and keeps their cap", store.DatasetCommands, retention.Policy{TTL: 48 * time.Hour, MaxRows: retention.Defaults()[store.DatasetCommands].MaxRows}},
		{"--retain wins over --retention", store.DatasetLogs, retention.Policy{TTL: time.Hour, MaxRows: 10}},
		{"a dataset left alone keeps the default", store.DatasetEvents, retention.Defaults()[store.DatasetEvents]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if pol[tt.d] != tt.want {
				t.Errorf("%s: %+v, want %+v", tt.d, pol[tt.d], tt.want)
			}
		})
	}
}
