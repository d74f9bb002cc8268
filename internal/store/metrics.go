package store

import (
	"context"
	"time"
)

// MetricSample is one reading of a sandbox's resource usage, as E2B's SandboxMetric reports
// it plus network counters. Counters (network) are cumulative since the sandbox started;
// gauges (memory, disk) are the value at Time; CPUUsedPct is the average since the previous
// sample.
type MetricSample struct {
	SandboxID string
	TeamID    string
	Time      time.Time
	CPUCount  int
	// CPUUsedPct is the share of the sandbox's CPUCount cores used, 0..100.
	CPUUsedPct float64
	MemUsed    uint64 // bytes in use, without reclaimable page cache
	MemTotal   uint64 // the sandbox's memory limit
	MemCache   uint64 // page cache charged to the sandbox
	DiskUsed   uint64 // bytes the sandbox has written to its root (the overlay's upper layer)
	DiskTotal  uint64
	// Network counters of every interface in the sandbox's network namespace, loopback
	// included.
	NetRxBytes, NetTxBytes, NetRxPackets, NetTxPackets uint64
}

// MetricStore stores sandboxes' resource samples: a time series per sandbox, pruned by age.
type MetricStore interface {
	// InsertSamples stores samples in one transaction. A sample with the (SandboxID, Time) of
	// a stored one replaces it.
	InsertSamples(ctx context.Context, samples []MetricSample) error
	// QuerySamples returns sandboxID's samples with start <= Time <= end, oldest first. A
	// zero start or end leaves that side unbounded.
	QuerySamples(ctx context.Context, sandboxID string, start, end time.Time) ([]MetricSample, error)
	// LatestSamples returns the newest sample of each of ids that team teamID owns, in no
	// particular order; ids without samples are left out.
	LatestSamples(ctx context.Context, teamID string, ids []string) ([]MetricSample, error)
	// PruneSamples deletes the samples taken before before.
	PruneSamples(ctx context.Context, before time.Time) error
}
