// Package logs takes sandboxes' log lines into the log store and serves them, and the
// command records, over HTTP.
//
// The one idea: Add never blocks the pipe a line came from. Each sandbox has a line rate and
// a byte budget; a line over either, or one that finds the queue full, is dropped and
// counted, and the count is reported in one "log lines dropped" line per sandbox per minute
// at most. A background goroutine writes what was admitted in batches, one transaction each.
package logs

import (
	"context"
	"log/slog"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/telemetry"
)

// Config tunes an Ingester. Zero values take the defaults.
type Config struct {
	// MaxLinesPerSecPerSandbox is a sandbox's sustained line rate, with a burst of one
	// second's worth; 2000 by default, negative for no limit.
	MaxLinesPerSecPerSandbox int
	// MaxBytesPerMinutePerSandbox is a sandbox's message bytes per minute (a fixed window);
	// 16 MiB by default, negative for no limit.
	MaxBytesPerMinutePerSandbox int64
	// MaxLineBytes cuts longer messages on a UTF-8 boundary; 32 KiB by default.
	MaxLineBytes int
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

// Ingester writes log lines to a store in the background. Its methods are safe for
// concurrent use.
type Ingester struct {
	store store.LogStore
	cfg   Config

	mu        sync.Mutex
	queue     []store.LogLine
	sandboxes map[string]*sandboxState
	closed    bool

	kick chan struct{}
	done chan struct{}
	err  error // the last write error, reported by Close
}

// NewIngester starts an Ingester writing to s. Close it to write what is queued.
func NewIngester(s store.LogStore, cfg Config) *Ingester {
	cfg.defaults()
	in := &Ingester{
		store:     s,
		cfg:       cfg,
		sandboxes: map[string]*sandboxState{},
		kick:      make(chan struct{}, 1),
		done:      make(chan struct{}),
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
	in.mu.Lock()
	st := in.sandboxes[l.SandboxID]
	if st == nil {
		st = &sandboxState{tokens: float64(in.cfg.MaxLinesPerSecPerSandbox), refilled: now, windowStart: now}
		in.sandboxes[l.SandboxID] = st
	}
	st.teamID, st.lastSeen = l.TeamID, now
	if why := in.admit(st, &l, now); why != "" {
		st.countDropped(why, 1)
		in.mu.Unlock()
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

// admit charges l to its sandbox's limits and returns why it must be dropped, or "".
// in.mu is held.
func (in *Ingester) admit(st *sandboxState, l *store.LogLine, now time.Time) string {
	switch {
	case in.closed:
		return dropClosed
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
		if st.windowBytes+int64(len(l.Message)) > budget {
			return dropBytes
		}
		st.windowBytes += int64(len(l.Message))
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
		in.mu.Lock()
		batch, closed := in.queue, in.closed
		in.queue = nil
		for _, st := range in.sandboxes {
			st.queued = 0
		}
		in.mu.Unlock()
		in.write(batch)
		in.report(closed)
		if closed {
			return
		}
		timer.Reset(in.cfg.FlushInterval)
	}
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
