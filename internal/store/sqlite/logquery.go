package sqlite

import (
	"bytes"
	"fmt"
	"math"
	"slices"

	"github.com/cove-dev/cove/internal/store"
)

// asciiLower appends s with ASCII letters lowered to dst, as LIKE compares them.
func asciiLower(dst, s []byte) []byte {
	for _, c := range s {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		dst = append(dst, c)
	}
	return dst
}

// posLine is a line with its seq, the second half of its position.
type posLine struct {
	line store.LogLine
	seq  int64
}

// logBefore reports whether position (ts1, seq1) comes before (ts2, seq2) in a listing's
// order.
func logBefore(backward bool, ts1, seq1, ts2, seq2 int64) bool {
	if backward {
		return ts1 > ts2 || ts1 == ts2 && seq1 > seq2
	}
	return ts1 < ts2 || ts1 == ts2 && seq1 < seq2
}

// lineCollector keeps the first `need` lines, in a listing's order, of those offered.
type lineCollector struct {
	backward bool
	need     int
	lines    []posLine
	sorted   bool
}

func (c *lineCollector) full() bool { return c.sorted && len(c.lines) >= c.need }

// worst is the position of the last line kept; only when full.
func (c *lineCollector) worst() (int64, int64) {
	l := &c.lines[c.need-1]
	return toMicros(l.line.Time), l.seq
}

// wants reports whether a line at (ts, seq) would be kept.
func (c *lineCollector) wants(ts, seq int64) bool {
	if !c.full() {
		return true
	}
	wts, wseq := c.worst()
	return logBefore(c.backward, ts, seq, wts, wseq)
}

func (c *lineCollector) add(l posLine) {
	c.lines = append(c.lines, l)
	c.sorted = false
}

// settle sorts the kept lines and drops those past need.
func (c *lineCollector) settle() {
	if c.sorted {
		return
	}
	slices.SortFunc(c.lines, func(a, b posLine) int {
		ta, tb := toMicros(a.line.Time), toMicros(b.line.Time)
		switch {
		case logBefore(c.backward, ta, a.seq, tb, b.seq):
			return -1
		case logBefore(c.backward, tb, b.seq, ta, a.seq):
			return 1
		}
		return 0
	})
	if len(c.lines) > c.need {
		c.lines = c.lines[:c.need]
	}
	c.sorted = true
}

// done reports whether no line of a chunk spanning [minTs, maxTs] can be kept, nor of any
// chunk after it in the scan's order (ascending min_ts forward, descending max_ts backward).
func (c *lineCollector) done(minTs, maxTs int64) bool {
	c.settle()
	if !c.full() {
		return false
	}
	wts, _ := c.worst()
	if c.backward {
		return maxTs < wts
	}
	return minTs > wts
}

// logFilter is a LogQuery's per-line checks.
type logFilter struct {
	q        *store.LogQuery
	lo, hi   int64 // ts bounds from the cursor, inclusive
	minLevel byte
	terms    [][]byte // lowered
	buf      []byte
}

func newLogFilter(q *store.LogQuery) (*logFilter, error) {
	f := &logFilter{q: q, lo: math.MinInt64, hi: math.MaxInt64}
	if !q.Cursor.IsZero() {
		ms := q.Cursor.UnixMilli()
		if q.Backward {
			f.hi = ms*1000 + 999
		} else {
			f.lo = ms * 1000
		}
	}
	if !q.Since.IsZero() {
		f.lo = max(f.lo, toMicros(q.Since))
	}
	if !q.Until.IsZero() {
		f.hi = min(f.hi, toMicros(q.Until)-1)
	}
	if q.MinLevel != "" {
		rank, ok := store.LogLevelRank(q.MinLevel)
		if !ok {
			return nil, fmt.Errorf("query logs: unknown level %q", q.MinLevel)
		}
		f.minLevel = byte(rank)
	}
	for _, t := range store.SearchTerms(q.Search) {
		f.terms = append(f.terms, asciiLower(nil, []byte(t)))
	}
	return f, nil
}

func (f *logFilter) match(l *chunkLine) bool {
	q := f.q
	if l.ts < f.lo || l.ts > f.hi {
		return false
	}
	if q.After != nil && !logBefore(q.Backward, toMicros(q.After.Time), q.After.Seq, l.ts, l.seq) {
		return false
	}
	if l.level < f.minLevel {
		return false
	}
	if q.PID != 0 && l.pid != int64(q.PID) {
		return false
	}
	if q.Source != "" && string(l.source) != q.Source {
		return false
	}
	if q.Stream != "" && string(l.stream) != q.Stream {
		return false
	}
	if q.RequestID != "" && string(l.request) != q.RequestID {
		return false
	}
	for k, v := range q.Fields {
		got, ok := l.field(k)
		if !ok || string(got) != v {
			return false
		}
	}
	if len(f.terms) > 0 {
		f.buf = asciiLower(f.buf[:0], l.message)
		for _, t := range f.terms {
			if !bytes.Contains(f.buf, t) {
				return false
			}
		}
	}
	return true
}
