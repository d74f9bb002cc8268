package store

import (
	"context"
	"fmt"
	"time"
)

// Dataset is one of the stores that grow with use and so have an end: a TTL and a size cap.
type Dataset string

// The datasets with an end.
const (
	DatasetEvents     Dataset = "events"             // lifecycle events
	DatasetDeliveries Dataset = "webhook_deliveries" // finished webhook deliveries and their attempts
	DatasetSamples    Dataset = "metric_samples"     // per-sandbox resource samples
	DatasetCommands   Dataset = "command_records"    // ended commands' records
	DatasetLogs       Dataset = "log_lines"          // collected log lines
	DatasetBuilds     Dataset = "template_builds"    // finished template build records and their logs (store.TemplateBuilds)
	DatasetUploads    Dataset = "template_uploads"   // archives uploaded or packed on the host for COPY steps (files)
	DatasetBuildLogs  Dataset = "build_logs"         // templates' build log files
)

// Datasets lists every Dataset, in the order status shows them.
func Datasets() []Dataset {
	return []Dataset{DatasetEvents, DatasetDeliveries, DatasetSamples, DatasetCommands, DatasetLogs, DatasetBuilds, DatasetUploads, DatasetBuildLogs}
}

// InFiles reports whether d is pruned beside the store's own retention, by the template
// package: the uploads and host build logs (files) and the build records (store.TemplateBuilds,
// which the builds prune with what they keep beside a record).
func (d Dataset) InFiles() bool {
	return d == DatasetBuilds || d == DatasetUploads || d == DatasetBuildLogs
}

// String returns the dataset's name.
func (d Dataset) String() string {
	if d == "" {
		return "unknown"
	}
	return string(d)
}

// ParseDataset returns the dataset named s, or an error for any other name.
func ParseDataset(s string) (Dataset, error) {
	for _, d := range Datasets() {
		if string(d) == s {
			return d, nil
		}
	}
	return "", fmt.Errorf("unknown dataset %q", s)
}

// Usage is what a dataset holds now. Rows counts its unit: log lines for DatasetLogs, log
// files for DatasetBuildLogs, rows for the others. Bytes is what its tables and indexes take
// in the store (its files, for DatasetBuildLogs).
type Usage struct {
	Rows   int64
	Bytes  int64
	Oldest time.Time // zero when empty
}

// RetentionStore is what retention needs from the store. Each prune call deletes at most
// batch rows (chunks, for logs) in one short write transaction, so writers wait for one
// batch at most; callers loop until it returns fewer than asked. Rows still needed are never
// pruned: events with a pending delivery, pending deliveries, records of running commands.
type RetentionStore interface {
	Usage(ctx context.Context, d Dataset, bytes bool) (Usage, error)
	// PruneBefore deletes rows of d older than before.
	PruneBefore(ctx context.Context, d Dataset, before time.Time, batch int) (int64, error)
	// PruneOverCap deletes the oldest rows of d while it holds more than maxRows.
	PruneOverCap(ctx context.Context, d Dataset, maxRows int64, batch int) (int64, error)
}
