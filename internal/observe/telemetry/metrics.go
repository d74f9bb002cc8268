package telemetry

import (
	"fmt"
	"sync"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/cove-dev/cove/sdk/reason"
)

// Registry holds every Cove metric once Metrics has been called. Names live here and nowhere
// else: a cove_ prefix, base units, _total on counters, and bounded labels only (never a
// sandbox id).
var Registry = prometheus.NewRegistry()

var registerOnce sync.Once

// Metrics registers Cove's metrics and the Go and process collectors, once, and returns the
// registry. It is not done at init: `cove envd` shares the binary and must stay small.
func Metrics() *prometheus.Registry {
	registerOnce.Do(register)
	return Registry
}

// Cove's metrics.
var (
	NetworkDenied = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cove_network_denied_packets_total", Help: "Sandbox packets refused by Cove's network rules and logged (at most 10 a second per rule of a sandbox), by rule kind.",
	}, []string{"kind"})
	SandboxesCreated = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cove_sandboxes_created_total", Help: "Sandboxes created, by template.",
	}, []string{"template"})
	SandboxesKilled = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cove_sandboxes_killed_total", Help: "Sandboxes killed, by kill reason.",
	}, []string{"kill_reason"})
	SandboxCreateFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cove_sandbox_create_failures_total", Help: "Sandbox creations that failed, by stage.",
	}, []string{"stage"})
	SandboxesLive = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "cove_sandboxes", Help: "Sandboxes alive now, by state.",
	}, []string{"state"})
	SandboxCreateSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "cove_sandbox_create_seconds", Help: "Time from a create call to envd ready.",
		Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5},
	})
	SandboxTransitionSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "cove_sandbox_transition_seconds", Help: "Time to pause, resume or kill a sandbox.",
		Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1},
	}, []string{"transition"})
	SnapshotSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "cove_snapshot_seconds", Help: "Time to write a sandbox's snapshot (checkpoint) to disk at a pause.",
		Buckets: []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 30},
	})
	SnapshotBytes = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "cove_snapshot_bytes", Help: "Size on disk of a sandbox's snapshot.",
		Buckets: prometheus.ExponentialBuckets(1<<20, 4, 8), // 1 MiB .. 16 GiB
	})
	RestoreSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "cove_restore_seconds", Help: "Time to restore a sandbox from its snapshot at a resume.",
		Buckets: []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 30},
	})
	ProxyRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cove_proxy_requests_total", Help: "Requests proxied to sandboxes, by outcome.",
	}, []string{"outcome"})
	APIRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cove_api_requests_total", Help: "REST API requests, by route and status class.",
	}, []string{"route", "code"})
	LogLinesDropped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cove_log_lines_dropped_total", Help: "Sandbox log lines dropped, by reason (envd: by envd's budgets, counted in command records).",
	}, []string{"reason"})
	LogBytesDropped = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "cove_log_bytes_dropped_total", Help: "Sandbox output bytes envd did not collect as lines: over a byte budget, or binary.",
	})
	WebhookAttempts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cove_webhook_attempts_total", Help: "Webhook delivery attempts, by outcome: delivered, retry (failed, tried again later), failed (given up).",
	}, []string{"outcome"})
)

// Webhook attempt outcomes, the values of WebhookAttempts' label.
const (
	WebhookDelivered = "delivered"
	WebhookRetry     = "retry"
	WebhookFailed    = "failed"
)

// Disk space of the filesystems holding Cove's directories, read at every scrape.
var (
	diskFree = prometheus.NewDesc("cove_disk_free_bytes",
		"Bytes available to Cove on the filesystem of each of its directories (data: state, logs, sandboxes and snapshots; templates).", []string{"dir"}, nil)
	diskSize = prometheus.NewDesc("cove_disk_size_bytes",
		"Size in bytes of the filesystem of each of Cove's directories.", []string{"dir"}, nil)
	disks = &diskCollector{dirs: map[string]string{}}
)

// WatchDisk reports the free and total bytes of the filesystem holding path on /metrics,
// labelled dir=name (a fixed name such as "data" or "templates", never a sandbox's).
func WatchDisk(name, path string) {
	disks.mu.Lock()
	defer disks.mu.Unlock()
	disks.dirs[name] = path
}

type diskCollector struct {
	mu   sync.Mutex
	dirs map[string]string
}

func (d *diskCollector) Describe(ch chan<- *prometheus.Desc) { ch <- diskFree; ch <- diskSize }

func (d *diskCollector) Collect(ch chan<- prometheus.Metric) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for name, path := range d.dirs {
		var st syscall.Statfs_t
		if err := syscall.Statfs(path, &st); err != nil {
			ch <- prometheus.NewInvalidMetric(diskFree, fmt.Errorf("statfs %s: %w", path, err))
			continue
		}
		ch <- prometheus.MustNewConstMetric(diskFree, prometheus.GaugeValue, float64(st.Bavail)*float64(st.Bsize), name)
		ch <- prometheus.MustNewConstMetric(diskSize, prometheus.GaugeValue, float64(st.Blocks)*float64(st.Bsize), name)
	}
}

// Snapshot disk by team, read at every scrape.
var (
	snapshotDisk = prometheus.NewDesc("cove_snapshot_disk_bytes",
		"Bytes on the data dir's disk held by a team's sandboxes paused as snapshots (kind=paused) and by its snapshots (kind=snapshot).", []string{"team", "kind"}, nil)
	snapshotDisks = &snapshotDiskCollector{}
)

// Snapshot disk kinds, the values of cove_snapshot_disk_bytes' kind label.
const (
	SnapshotDiskPaused   = "paused"
	SnapshotDiskSnapshot = "snapshot"
)

// WatchSnapshotDisk reports, at every scrape, what read says each team's snapshots take:
// read calls emit once per team and kind (SnapshotDiskPaused, SnapshotDiskSnapshot).
func WatchSnapshotDisk(read func(emit func(team, kind string, bytes int64))) {
	snapshotDisks.mu.Lock()
	defer snapshotDisks.mu.Unlock()
	snapshotDisks.read = read
}

type snapshotDiskCollector struct {
	mu   sync.Mutex
	read func(emit func(team, kind string, bytes int64))
}

func (d *snapshotDiskCollector) Describe(ch chan<- *prometheus.Desc) { ch <- snapshotDisk }

func (d *snapshotDiskCollector) Collect(ch chan<- prometheus.Metric) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.read == nil {
		return
	}
	d.read(func(team, kind string, bytes int64) {
		ch <- prometheus.MustNewConstMetric(snapshotDisk, prometheus.GaugeValue, float64(bytes), team, kind)
	})
}

func register() {
	Registry.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		SandboxesCreated, SandboxesKilled, SandboxCreateFailures, SandboxesLive,
		SandboxCreateSeconds, SandboxTransitionSeconds, ProxyRequests, APIRequests,
		SnapshotSeconds, SnapshotBytes, RestoreSeconds,
		LogLinesDropped, LogBytesDropped, WebhookAttempts, disks, snapshotDisks,
	)
	for _, o := range []string{WebhookDelivered, WebhookRetry, WebhookFailed} {
		WebhookAttempts.WithLabelValues(o)
	}
	for _, r := range reason.KillReasons {
		SandboxesKilled.WithLabelValues(r.String())
	}
	Registry.MustRegister(StoreRows, StoreBytes, StoreOldestAgeSeconds, StoreRetentionSeconds, StoreMaxRows, StorePruned)
	Registry.MustRegister(NetworkDenied)
	Registry.MustRegister(PoolReady, PoolTarget, PoolClaims, PoolBoots, PoolDiscarded)
}

// What each store keeps (internal/observe/retention), by dataset: a closed set of five.
var (
	StoreRows = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "cove_store_rows", Help: "Rows each dataset holds now (lines for log_lines).",
	}, []string{"dataset"})
	StoreBytes = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "cove_store_bytes", Help: "Bytes each dataset's tables and indexes take in the store.",
	}, []string{"dataset"})
	StoreOldestAgeSeconds = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "cove_store_oldest_age_seconds", Help: "Age of each dataset's oldest row (0 when empty).",
	}, []string{"dataset"})
	StoreRetentionSeconds = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "cove_store_retention_seconds", Help: "How long each dataset keeps a row (its TTL).",
	}, []string{"dataset"})
	StoreMaxRows = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "cove_store_max_rows", Help: "Each dataset's size cap in rows (lines for log_lines); past it the oldest go.",
	}, []string{"dataset"})
	StorePruned = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cove_store_pruned_total", Help: "Rows pruned from each dataset, by why: ttl or cap.",
	}, []string{"dataset", "why"})
)
