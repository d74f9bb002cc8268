package trace

import (
	"sort"
	"time"

	"github.com/cove-dev/cove/internal/observe/telemetry"
)

// A trace reads as a waterfall: one row per step, its bar placed on the request's own time
// axis. A step that says how long it took (an access line's or a command's duration_ms) is a
// span ending at its time; any other step is a mark at its time. The console draws it, and
// `cove trace` prints it.

// Span is one row of a waterfall.
type Span struct {
	Entry
	Start    time.Time
	Duration time.Duration
	Left     float64 // the bar's offset, percent of the whole
	Width    float64 // the bar's width, percent of the whole (a floor for marks)
	Node     string  // the cluster node that logged it, when it says
}

// Waterfall lays entries out on one axis, earliest start first, and returns how long the
// whole took.
func Waterfall(entries []Entry) (rows []Span, total time.Duration) {
	if len(entries) == 0 {
		return nil, 0
	}
	for _, e := range entries {
		s := Span{Entry: e, Start: e.Time}
		if ms, ok := number(e.Fields[telemetry.KeyDurationMS]); ok && ms > 0 {
			s.Duration = time.Duration(ms * float64(time.Millisecond))
			s.Start = e.Time.Add(-s.Duration)
		}
		if n, ok := e.Fields[telemetry.KeyNode].(string); ok {
			s.Node = n
		}
		rows = append(rows, s)
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].Start.Before(rows[j].Start) })
	begin, end := rows[0].Start, rows[0].Start
	for _, s := range rows {
		if t := s.Start.Add(s.Duration); t.After(end) {
			end = t
		}
	}
	total = end.Sub(begin)
	for i := range rows {
		s := &rows[i]
		if total > 0 {
			s.Left = 100 * float64(s.Start.Sub(begin)) / float64(total)
			s.Width = 100 * float64(s.Duration) / float64(total)
		}
		s.Width = max(s.Width, 0.4)
		s.Left = min(s.Left, 100-s.Width)
	}
	return rows, total
}

// number reads a JSON number field (float64 from JSON, or an integer a caller set).
func number(v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, true
	case int64:
		return float64(n), true
	case int:
		return float64(n), true
	}
	return 0, false
}
