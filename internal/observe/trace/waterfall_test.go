package trace

import (
	"testing"
	"time"
)

func TestWaterfallPlacesStepsOnOneAxis(t *testing.T) {
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	rows, total := Waterfall([]Entry{
		{Time: at.Add(100 * time.Millisecond), Source: "server", Message: "request done", Fields: map[string]any{"duration_ms": 100.0, "node": "a"}},
		{Time: at.Add(50 * time.Millisecond), Source: "envd", Message: "mark"},
		{Time: at.Add(90 * time.Millisecond), Source: "command", Message: "ran", Fields: map[string]any{"duration_ms": int64(20)}},
	})
	if total != 100*time.Millisecond || len(rows) != 3 {
		t.Fatalf("total %v, %d rows", total, len(rows))
	}
	want := []struct {
		source      string
		left, width float64
		node        string
	}{{"server", 0, 100, "a"}, {"envd", 50, 0.4, ""}, {"command", 70, 20, ""}}
	for i, w := range want {
		r := rows[i]
		if r.Source != w.source || r.Left != w.left || r.Width != w.width || r.Node != w.node {
			t.Errorf("row %d: %s left %.2f width %.2f node %q; want %+v", i, r.Source, r.Left, r.Width, r.Node, w)
		}
	}
	if rows, total := Waterfall(nil); rows != nil || total != 0 {
		t.Error("an empty trace has rows")
	}
	one, total := Waterfall([]Entry{{Time: at, Source: "event"}})
	if total != 0 || one[0].Left != 0 || one[0].Width != 0.4 {
		t.Errorf("a single mark: %+v %v", one, total)
	}
}
