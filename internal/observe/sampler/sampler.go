// Package sampler records every live sandbox's resource usage into the metric store every
// few seconds (E2B's metrics routes, in internal/control/api/teamroutes, read them).
//
// The idea to hold on to: every number is read host-side, from the kernel's own accounting
// (the sandbox's cgroup v1 files, its network namespace's interface counters, the blocks of
// its overlay's upper layer), so sampling neither enters the sandbox nor depends on envd, and
// a frozen or misbehaving sandbox is measured the same as a healthy one.
package sampler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	goruntime "runtime"
	"sync"
	"time"

	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/store"
)

// Defaults of Config.
const (
	DefaultInterval       = 5 * time.Second
	DefaultDiskEvery      = 6
	DefaultDiskMaxEntries = 100_000
	DefaultRetention      = 24 * time.Hour
)

// bufs holds the buffers samples read kernel files into: memory.stat and /proc/net/dev
// are about 1 KiB.
var bufs = sync.Pool{New: func() any { return new([8192]byte) }}

// pruneEvery is how often Run deletes samples older than the retention.
const pruneEvery = 10 * time.Minute

// Target is one live sandbox, as the orchestrator knows it.
type Target struct {
	ID     string
	TeamID string
	// CPUCount is the sandbox's cores, the denominator of CPUUsedPct; the host's when 0.
	CPUCount int
	// DiskTotal is the sandbox's disk size in bytes; the upper dir's filesystem size when 0.
	DiskTotal uint64
	// CgroupPath is the sandbox's absolute cgroup path, the same in every v1 hierarchy
	// (runtime.Runc.CgroupPath: "/cove/<id>").
	CgroupPath string
	// NetnsPath is the pinned network namespace (runtime.Runc.NetnsPath); "" for a sandbox
	// on the host's network, which reports no network counters.
	NetnsPath string
	// UpperDir is the overlay's upper layer, where everything the sandbox writes to its
	// root lands (<runtime data dir>/<id>/upper); "" reports no disk use.
	UpperDir string
}

// Source lists the sandboxes to sample.
type Source interface {
	// Live returns the sandboxes running now. It is called once per interval and should
	// not block.
	Live() []Target
}

// Config configures a Sampler.
type Config struct {
	Source Source
	Store  store.MetricStore
	// Interval is the time between samples; DefaultInterval when 0.
	Interval time.Duration
	// DiskEvery: the upper dir is walked on every DiskEvery-th sample of a sandbox (and its
	// first); samples in between repeat the last walk's figure. DefaultDiskEvery when 0.
	DiskEvery int
	// DiskMaxEntries caps one walk; a bigger upper dir reports the use of the entries seen.
	// DefaultDiskMaxEntries when 0.
	DiskMaxEntries int
	// Retention is how long samples are kept; DefaultRetention when 0.
	Retention time.Duration
	// Logger logs failures; nil uses telemetry's default.
	Logger *slog.Logger
}

// Sampler samples the sandboxes its Source lists. Run drives it; Close stops it.
type Sampler struct {
	cfg       Config
	hostCPUs  int
	hostMem   uint64
	stop      chan struct{}
	closeOnce sync.Once

	mu      sync.Mutex
	state   map[string]*targetState
	running chan struct{} // closed when Run returns; nil before Run
}

// targetState is what one sandbox's next sample builds on.
type targetState struct {
	n       int           // samples taken
	cpu     time.Duration // cpuacct.usage at the last sample
	at      time.Time     // when it was read
	disk    uint64        // the last walk's figure
	failing bool          // the last sample failed and was logged
}

// New returns a Sampler; call Run to start it.
func New(cfg Config) (*Sampler, error) {
	if cfg.Source == nil || cfg.Store == nil {
		return nil, errors.New("sampler: a source and a store are required")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.DiskEvery <= 0 {
		cfg.DiskEvery = DefaultDiskEvery
	}
	if cfg.DiskMaxEntries <= 0 {
		cfg.DiskMaxEntries = DefaultDiskMaxEntries
	}
	if cfg.Retention <= 0 {
		cfg.Retention = DefaultRetention
	}
	if cfg.Logger == nil {
		cfg.Logger = telemetry.Logger(context.Background())
	}
	return &Sampler{
		cfg:      cfg,
		hostCPUs: goruntime.NumCPU(),
		hostMem:  hostMemory(),
		stop:     make(chan struct{}),
		state:    map[string]*targetState{},
	}, nil
}

// Run samples every Interval, starting at once, until ctx ends or Close is called. Samples
// older than the retention are pruned every few minutes.
func (s *Sampler) Run(ctx context.Context) error {
	done := make(chan struct{})
	s.mu.Lock()
	if s.running != nil {
		s.mu.Unlock()
		return errors.New("sampler: already running")
	}
	s.running = done
	s.mu.Unlock()
	defer close(done)

	ctx = telemetry.WithLogger(ctx, s.cfg.Logger)
	tick := time.NewTicker(s.cfg.Interval)
	defer tick.Stop()
	var pruned time.Time
	for {
		if err := s.Tick(ctx); err != nil && ctx.Err() == nil {
			telemetry.Warnings.Warn(ctx, s.cfg.Logger, "", "metrics not stored", telemetry.KeyError, err)
		}
		if now := time.Now(); now.Sub(pruned) >= pruneEvery {
			pruned = now
			if err := s.cfg.Store.PruneSamples(ctx, now.Add(-s.cfg.Retention)); err != nil && ctx.Err() == nil {
				telemetry.Warnings.Warn(ctx, s.cfg.Logger, "", "metrics not pruned", telemetry.KeyError, err)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-s.stop:
			return nil
		case <-tick.C:
		}
	}
}

// Close stops Run and waits for it to return.
func (s *Sampler) Close() error {
	s.closeOnce.Do(func() { close(s.stop) })
	s.mu.Lock()
	done := s.running
	s.mu.Unlock()
	if done != nil {
		<-done
	}
	return nil
}

// Tick samples every live sandbox once and stores the samples in one transaction. A
// sandbox that cannot be read is skipped (and logged once until it recovers); one that
// vanished in between is skipped silently.
func (s *Sampler) Tick(ctx context.Context) error {
	targets := s.cfg.Source.Live()
	samples := make([]store.MetricSample, 0, len(targets))
	live := make(map[string]bool, len(targets))
	for _, t := range targets {
		live[t.ID] = true
		sample, err := s.Sample(t)
		if err == nil {
			samples = append(samples, sample)
		}
		if s.failing(t.ID, err) {
			s.cfg.Logger.Warn("sandbox not sampled", telemetry.KeySandboxID, t.ID, telemetry.KeyTeamID, t.TeamID, telemetry.KeyError, err)
		}
	}
	s.mu.Lock()
	for id := range s.state {
		if !live[id] {
			delete(s.state, id)
		}
	}
	s.mu.Unlock()
	return s.cfg.Store.InsertSamples(ctx, samples)
}

// failing records the outcome of id's sample and reports whether err is worth logging: a
// new failure other than the sandbox being gone.
func (s *Sampler) failing(id string, err error) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stateLocked(id)
	if err == nil || errors.Is(err, os.ErrNotExist) {
		st.failing = false
		return false
	}
	log := !st.failing
	st.failing = true
	return log
}

func (s *Sampler) stateLocked(id string) *targetState {
	st := s.state[id]
	if st == nil {
		st = &targetState{}
		s.state[id] = st
	}
	return st
}

// Sample reads t's usage now. CPUUsedPct is the average since t's previous Sample, 0 on the
// first. An error wrapping os.ErrNotExist means the sandbox is gone.
func (s *Sampler) Sample(t Target) (store.MetricSample, error) {
	s.mu.Lock()
	st := *s.stateLocked(t.ID)
	s.mu.Unlock()
	cores := t.CPUCount
	if cores <= 0 {
		cores = s.hostCPUs
	}
	out := store.MetricSample{SandboxID: t.ID, TeamID: t.TeamID, CPUCount: cores}
	buf := bufs.Get().(*[8192]byte)
	defer bufs.Put(buf)

	cg, err := readCgroup(t.CgroupPath, buf[:])
	if err != nil {
		return out, fmt.Errorf("sample %s: %w", t.ID, err)
	}
	now := time.Now()
	out.Time = now
	if st.n > 0 && cg.cpu >= st.cpu && now.After(st.at) {
		pct := 100 * float64(cg.cpu-st.cpu) / float64(now.Sub(st.at)) / float64(cores)
		out.CPUUsedPct = math.Round(min(pct, 100)*100) / 100
	}
	out.MemUsed = cg.usage - min(cg.usage, cg.inactiveFile)
	out.MemCache = cg.cache
	out.MemTotal = cg.limit
	if out.MemTotal == 0 || out.MemTotal > s.hostMem {
		out.MemTotal = s.hostMem // no limit: the host's memory bounds it
	}

	if t.NetnsPath != "" {
		n, err := readNetns(t.NetnsPath, buf[:])
		if err != nil {
			return out, fmt.Errorf("sample %s: network: %w", t.ID, err)
		}
		out.NetRxBytes, out.NetTxBytes, out.NetRxPackets, out.NetTxPackets = n.rxBytes, n.txBytes, n.rxPackets, n.txPackets
	}

	disk := st.disk
	if t.UpperDir != "" {
		if st.n%s.cfg.DiskEvery == 0 {
			used, _, err := diskUsage(t.UpperDir, s.cfg.DiskMaxEntries)
			if err != nil {
				return out, fmt.Errorf("sample %s: disk: %w", t.ID, err)
			}
			disk = used
		}
		out.DiskTotal = t.DiskTotal
		if out.DiskTotal == 0 {
			out.DiskTotal = fsSize(t.UpperDir)
		}
	}
	out.DiskUsed = disk

	s.mu.Lock()
	next := s.stateLocked(t.ID)
	next.n++
	next.cpu, next.at, next.disk = cg.cpu, now, disk
	s.mu.Unlock()
	return out, nil
}
