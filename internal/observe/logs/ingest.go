// Package logs takes sandboxes' log lines into the log store (their REST routes, and the
// command records', are in internal/control/api/teamroutes).
//
// The one idea: Add never blocks the pipe a line came from. Each sandbox has a line rate and
// a byte budget, each team a byte budget per hour, and the store's disk a free-space floor;
// a line over any of them, or one that finds the queue full, is dropped and counted, and the count is reported in one "log lines dropped" line per sandbox per minute
// at most. A background goroutine writes what was admitted in batches, one transaction each.
package logs

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/store"
	cove "github.com/cove-dev/cove/sdk"
)

// Config tunes an Ingester. Zero values take the defaults.
type Config struct {
	// MaxLinesPerSecPerSandbox is a sandbox's sustained line rate, with a burst of one
	// second's worth; 2000 by default, negative for no limit.
	MaxLinesPerSecPerSandbox int
	// MaxBytesPerMinutePerSandbox is a sandbox's message bytes per minute (a fixed window);
	// 16 MiB by default, negative for no limit.
	MaxBytesPerMinutePerSandbox int64
	// MaxBytesPerHourPerTeam is the message and field bytes all of a team's sandboxes may
	// store per hour (a fixed window); 2 GiB by default, negative for no limit.
	MaxBytesPerHourPerTeam int64
	// MaxLineBytes cuts longer messages on a UTF-8 boundary, and drops a line's parsed
	// fields when their JSON is longer; 32 KiB by default.
	MaxLineBytes int
	// DataDir is a directory on the store's disk; "" skips the free-space floor.
	DataDir string
	// MinFreeBytes is the free space DataDir's disk keeps: below it lines are dropped, not
	// written. 1 GiB by default, negative for no floor.
	MinFreeBytes int64
	// FlushInterval is the longest a line waits to be written; 200 ms by default.
	FlushInterval time.Duration
	// BatchSize is the most lines one transaction writes, and the queue length that
	// triggers a write before FlushInterval; 1000 by default.
	BatchSize int
	// QueueSize is the most lines waiting to be written; more are dropped. 100000 by
	// default.
	QueueSize int
	// SandboxQueueSize is the most lines of one sandbox waiting to be written, so one noisy
	// sandbox cannot take the whole queue from the others; QueueSize/4 by default.
	SandboxQueueSize int
	// Logger receives Cove's own lines about ingestion (drops, failed writes).
	Logger *slog.Logger
	// OnLimit is told of each line a team's byte budget or the free-space floor dropped
	// (limit: cove.LimitTeamLogBytes, cove.LimitHostLogDisk), outside the ingester's lock; it
	// samples (events.Limits). nil tells nobody.
	OnLimit func(team, sandboxID, templateID, limit, detail string)
	// Now is the clock; time.Now by default.
	Now func() time.Time
}

func (c *Config) defaults() {
	if c.MaxLinesPerSecPerSandbox == 0 {
		c.MaxLinesPerSecPerSandbox = 2000
	}
	if c.MaxBytesPerMinutePerSandbox == 0 {
		c.MaxBytesPerMinutePerSandbox = 16 << 20
	}
	if c.MaxBytesPerHourPerTeam == 0 {
		c.MaxBytesPerHourPerTeam = 2 << 30
	}
	if c.MinFreeBytes == 0 {
		c.MinFreeBytes = 1 << 30
	}
	if c.MaxLineBytes <= 0 {
		c.MaxLineBytes = 32 << 10
	}
	if c.FlushInterval <= 0 {
		c.FlushInterval = 200 * time.Millisecond
	}
	if c.BatchSize <= 0 {
		c.BatchSize = 1000
	}
	if c.QueueSize <= 0 {
		c.QueueSize = 100_000
	}
	if c.SandboxQueueSize <= 0 {
		c.SandboxQueueSize = max(1, c.QueueSize/4)
	}
	if c.Logger == nil {
		c.Logger = telemetry.Logger(context.Background())
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Why a line was dropped.
const (
	dropRate    = "rate"
	dropBytes   = "bytes"
	dropTeam    = "team_bytes" // the team's hourly byte budget
	dropDisk    = "disk_floor" // the store's disk is below its free-space floor
	dropBacklog = "backlog"
	dropClosed  = "closed"
	dropEnvd    = "envd" // dropped inside the sandbox, by envd's budgets
	dropWrite   = "write_error"
)

// reportEvery is the shortest time between two "log lines dropped" lines of one sandbox.
const reportEvery = time.Minute

// forgetAfter is how long a quiet sandbox's limits and counts are kept.
const forgetAfter = time.Hour

// sandboxState is one sandbox's limits and drop counts.
type sandboxState struct {
	teamID      string
	tokens      float64
	refilled    time.Time
	windowStart time.Time
	windowBytes int64
	lastSeen    time.Time
	queued      int // lines in the queue, not yet taken by the writer

	dropped       uint64            // since the start
	unreported    map[string]uint64 // by reason, since the last report
	lastReport    time.Time
	everReported  bool
	pendingReport bool
}

// teamWindow is a team's bytes in the current hour.
type teamWindow struct {
	start time.Time
	bytes int64
}

// Ingester writes log lines to a store in the background. Its methods are safe for
// concurrent use.
type Ingester struct {
	store store.LogStore
	cfg   Config
	// teamBudget is what OnLimit is told of a line the team's budget dropped: made once, not
	// per dropped line.
	teamBudget string

	mu        sync.Mutex
	queue     []store.LogLine
	sandboxes map[string]*sandboxState
	teams     map[string]*teamWindow
	closed    bool
	lowDisk   bool // the store's disk was below MinFreeBytes at the last look

	kick chan struct{}
	done chan struct{}
	err  error // the last write error, reported by Close
}

// NewIngester starts an Ingester writing to s. Close it to write what is queued.
func NewIngester(s store.LogStore, cfg Config) *Ingester {
	cfg.defaults()
	in := &Ingester{
		store:      s,
		cfg:        cfg,
		teamBudget: fmt.Sprintf("log lines dropped: the team's sandboxes stored %d bytes this hour (--log-team-bytes-per-hour)", cfg.MaxBytesPerHourPerTeam),
		sandboxes:  map[string]*sandboxState{},
		teams:      map[string]*teamWindow{},
		kick:       make(chan struct{}, 1),
		done:       make(chan struct{}),
	}
	go in.run()
	return in
}

// Add queues l without blocking, or drops it when its sandbox is over its limits or the
// queue is full. A zero Time is the time of the call; an empty Level is info.
func (in *Ingester) Add(l store.LogLine) {
	now := in.cfg.Now()
	if l.Time.IsZero() {
		l.Time = now
	}
	if l.Level == "" {
		l.Level = "info"
	}
	if len(l.Message) > in.cfg.MaxLineBytes {
		l.Message = cutUTF8(l.Message, in.cfg.MaxLineBytes)
	}
	size := int64(len(l.Message))
	if len(l.Fields) > 0 {
		// Fields are stored as JSON beside the message: they count, and are bounded alike.
		b, err := json.Marshal(l.Fields)
		if err != nil || len(b) > in.cfg.MaxLineBytes {
			l.Fields = map[string]any{"fields.dropped_bytes": len(b)}
		} else {
			size += int64(len(b))
		}
	}
	in.mu.Lock()
	st := in.sandboxes[l.SandboxID]
	if st == nil {
		st = &sandboxState{tokens: float64(in.cfg.MaxLinesPerSecPerSandbox), refilled: now, windowStart: now}
		in.sandboxes[l.SandboxID] = st
	}
	st.teamID, st.lastSeen = l.TeamID, now
	if why := in.admit(st, l.TeamID, size, now); why != "" {
		st.countDropped(why, 1)
		in.mu.Unlock()
		in.limitReached(l, why)
		return
	}
	in.queue = append(in.queue, l)
	full := len(in.queue) >= in.cfg.BatchSize
	in.mu.Unlock()
	if full {
		select {
		case in.kick <- struct{}{}:
		default:
		}
	}
}

// countDropped counts n lines dropped for why, for the next report and on /metrics.
// in.mu is held.
func (st *sandboxState) countDropped(why string, n uint64) {
	st.dropped += n
	if st.unreported == nil {
		st.unreported = map[string]uint64{}
	}
	st.unreported[why] += n
	st.pendingReport = true
	telemetry.LogLinesDropped.WithLabelValues(why).Add(float64(n))
}

// DroppedInSandbox counts lines envd dropped inside the sandbox (its budgets, reported in a
// command record) with the host's own drops: in the sandbox's "log lines dropped" line and
// on /metrics. bytes is the output envd did not send as lines.
func (in *Ingester) DroppedInSandbox(sandboxID, teamID string, lines, bytes uint64) {
	if lines == 0 && bytes == 0 {
		return
	}
	telemetry.LogBytesDropped.Add(float64(bytes))
	if lines == 0 {
		return
	}
	now := in.cfg.Now()
	in.mu.Lock()
	defer in.mu.Unlock()
	st := in.sandboxes[sandboxID]
	if st == nil {
		st = &sandboxState{tokens: float64(in.cfg.MaxLinesPerSecPerSandbox), refilled: now, windowStart: now}
		in.sandboxes[sandboxID] = st
	}
	st.teamID, st.lastSeen = teamID, now
	st.countDropped(dropEnvd, lines)
}

// limitReached tells OnLimit of a line dropped by a team's or the host's bound.
func (in *Ingester) limitReached(l store.LogLine, why string) {
	if in.cfg.OnLimit == nil {
		return
	}
	switch why {
	case dropTeam:
		in.cfg.OnLimit(l.TeamID, l.SandboxID, l.TemplateID, cove.LimitTeamLogBytes, in.teamBudget)
	case dropDisk:
		in.cfg.OnLimit(l.TeamID, l.SandboxID, l.TemplateID, cove.LimitHostLogDisk,
			"log lines dropped: the log store's disk is below its free-space floor (--log-min-free-mb)")
	}
}

// admit charges a line of size bytes to its sandbox's and team's limits and returns why it
// must be dropped, or "". in.mu is held.
func (in *Ingester) admit(st *sandboxState, teamID string, size int64, now time.Time) string {
	switch {
	case in.closed:
		return dropClosed
	case in.lowDisk:
		return dropDisk
	case len(in.queue) >= in.cfg.QueueSize, st.queued >= in.cfg.SandboxQueueSize:
		return dropBacklog
	}
	if rate := in.cfg.MaxLinesPerSecPerSandbox; rate > 0 {
		if dt := now.Sub(st.refilled); dt > 0 {
			st.tokens = min(float64(rate), st.tokens+dt.Seconds()*float64(rate))
			st.refilled = now
		}
		if st.tokens < 1 {
			return dropRate
		}
	}
	if budget := in.cfg.MaxBytesPerMinutePerSandbox; budget > 0 {
		if now.Sub(st.windowStart) >= time.Minute {
			st.windowStart, st.windowBytes = now, 0
		}
		if st.windowBytes+size > budget {
			return dropBytes
		}
	}
	if budget := in.cfg.MaxBytesPerHourPerTeam; budget > 0 {
		tw := in.teams[teamID]
		if tw == nil || now.Sub(tw.start) >= time.Hour {
			tw = &teamWindow{start: now}
			in.teams[teamID] = tw
		}
		if tw.bytes+size > budget {
			return dropTeam
		}
		tw.bytes += size
	}
	if in.cfg.MaxBytesPerMinutePerSandbox > 0 {
		st.windowBytes += size
	}
	if in.cfg.MaxLinesPerSecPerSandbox > 0 {
		st.tokens--
	}
	st.queued++
	return ""
}

// Dropped returns how many of the sandbox's lines were dropped since the Ingester first saw
// it (or since it was forgotten after an hour's quiet).
func (in *Ingester) Dropped(sandboxID string) uint64 {
	in.mu.Lock()
	defer in.mu.Unlock()
	if st := in.sandboxes[sandboxID]; st != nil {
		return st.dropped
	}
	return 0
}

// Close writes the queued lines and stops the Ingester; lines added after it are dropped.
// It returns the last write error, if any write failed.
func (in *Ingester) Close() error {
	in.mu.Lock()
	if in.closed {
		in.mu.Unlock()
		<-in.done
		return in.err
	}
	in.closed = true
	in.mu.Unlock()
	select {
	case in.kick <- struct{}{}:
	default:
	}
	<-in.done
	return in.err
}

// run writes the queue every FlushInterval, or sooner when a batch is full, until Close.
func (in *Ingester) run() {
	defer close(in.done)
	timer := time.NewTimer(in.cfg.FlushInterval)
	defer timer.Stop()
	for {
		select {
		case <-timer.C:
		case <-in.kick:
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
		}
		low := in.belowFloor()
		in.mu.Lock()
		batch, closed := in.queue, in.closed
		in.queue = nil
		for _, st := range in.sandboxes {
			st.queued = 0
		}
		in.lowDisk = low
		var floored []store.LogLine // a line of each sandbox the floor dropped lines of
		if low {
			seen := map[string]bool{}
			for _, l := range batch {
				if st := in.sandboxes[l.SandboxID]; st != nil {
					st.countDropped(dropDisk, 1)
				}
				if !seen[l.SandboxID] {
					seen[l.SandboxID] = true
					floored = append(floored, l)
				}
			}
			batch = nil
		}
		in.mu.Unlock()
		for _, l := range floored {
			in.limitReached(l, dropDisk)
		}
		in.write(batch)
		in.report(closed)
		if closed {
			return
		}
		timer.Reset(in.cfg.FlushInterval)
	}
}

// belowFloor says the store's disk has less than MinFreeBytes free, logging each change.
func (in *Ingester) belowFloor() bool {
	if in.cfg.DataDir == "" || in.cfg.MinFreeBytes < 0 {
		return false
	}
	var st unix.Statfs_t
	if err := unix.Statfs(in.cfg.DataDir, &st); err != nil {
		in.cfg.Logger.Warn("log store free space unknown", telemetry.KeyError, err.Error())
		return false
	}
	free := int64(st.Bavail) * st.Bsize
	low := free < in.cfg.MinFreeBytes
	in.mu.Lock()
	was := in.lowDisk
	in.mu.Unlock()
	switch {
	case low && !was:
		in.cfg.Logger.Error("log store below its free-space floor: log lines are dropped", telemetry.KeyDiskFreeBytes, free, telemetry.KeyDiskFloorBytes, in.cfg.MinFreeBytes)
	case !low && was:
		in.cfg.Logger.Info("log store above its free-space floor again", telemetry.KeyDiskFreeBytes, free, telemetry.KeyDiskFloorBytes, in.cfg.MinFreeBytes)
	}
	return low
}

// write stores batch, BatchSize lines per transaction. A failed write drops its lines: a
// log pipe must not back up into the sandbox.
func (in *Ingester) write(batch []store.LogLine) {
	for len(batch) > 0 {
		n := min(len(batch), in.cfg.BatchSize)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := in.store.InsertLogs(ctx, batch[:n])
		cancel()
		if err != nil {
			in.err = err
			in.cfg.Logger.Error("log write failed", telemetry.KeyLines, n, telemetry.KeyError, err)
			in.mu.Lock()
			for _, l := range batch[:n] {
				if st := in.sandboxes[l.SandboxID]; st != nil {
					st.countDropped(dropWrite, 1)
				}
			}
			in.mu.Unlock()
		}
		batch = batch[n:]
	}
}

// report logs one "log lines dropped" line for each sandbox with unreported drops whose
// last report is a minute old, or all of them when final; and forgets quiet sandboxes.
func (in *Ingester) report(final bool) {
	now := in.cfg.Now()
	type line struct {
		sandbox, team string
		dropped       uint64
		by            map[string]uint64
	}
	var lines []line
	in.mu.Lock()
	for id, st := range in.sandboxes {
		if st.pendingReport && (final || !st.everReported || now.Sub(st.lastReport) >= reportEvery) {
			lines = append(lines, line{id, st.teamID, st.dropped, st.unreported})
			st.unreported, st.pendingReport = nil, false
			st.lastReport, st.everReported = now, true
		}
		if !st.pendingReport && now.Sub(st.lastSeen) > forgetAfter {
			delete(in.sandboxes, id)
		}
	}
	for team, tw := range in.teams {
		if now.Sub(tw.start) >= time.Hour {
			delete(in.teams, team)
		}
	}
	in.mu.Unlock()
	for _, l := range lines {
		args := []any{telemetry.KeySandboxID, l.sandbox, telemetry.KeyTeamID, l.team, "dropped.total", l.dropped}
		for why, n := range l.by {
			args = append(args, "dropped."+why, n)
		}
		in.cfg.Logger.Warn("log lines dropped", args...)
	}
}

// cutUTF8 returns s cut to at most n bytes, on a rune boundary.
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
