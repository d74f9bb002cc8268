package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestRateLimitedWarn(t *testing.T) {
	type step struct {
		after time.Duration // clock advance before the call
		key   string
	}
	tests := []struct {
		name  string
		steps []step
		want  []int // log.suppressed of each line logged, -1 when absent
	}{
		{name: "the first warning for a key is logged", steps: []step{{0, "a"}}, want: []int{-1}},
		{name: "repeats within the interval are dropped", steps: []step{{0, "a"}, {time.Second, "a"}, {time.Second, "a"}}, want: []int{-1}},
		{name: "the next line after the interval counts what was dropped",
			steps: []step{{0, "a"}, {time.Second, "a"}, {time.Second, "a"}, {time.Minute, "a"}}, want: []int{-1, 2}},
		{name: "different keys are limited separately", steps: []step{{0, "a"}, {0, "b"}, {0, "a"}}, want: []int{-1, -1}},
		{name: "a key quiet for an interval is logged again without a count",
			steps: []step{{0, "a"}, {2 * time.Minute, "a"}}, want: []int{-1, -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := time.Unix(1_700_000_000, 0)
			r := NewRateLimited(time.Minute)
			r.now = func() time.Time { return clock }
			var buf bytes.Buffer
			logger := slog.New(slog.NewJSONHandler(&buf, nil))
			for _, s := range tt.steps {
				clock = clock.Add(s.after)
				r.Warn(context.Background(), logger, s.key, "disk full", "path", "/x")
			}
			var got []int
			for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
				if line == "" {
					continue
				}
				var rec map[string]any
				if err := json.Unmarshal([]byte(line), &rec); err != nil {
					t.Fatalf("bad line %q: %v", line, err)
				}
				n, ok := rec[KeySuppressed].(float64)
				if !ok {
					n = -1
				}
				got = append(got, int(n))
			}
			if len(got) != len(tt.want) {
				t.Fatalf("logged %d lines %v, want %d %v:\n%s", len(got), got, len(tt.want), tt.want, buf.String())
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("line %d: log.suppressed = %d, want %d", i, got[i], tt.want[i])
				}
			}
		})
	}
}

func TestRateLimitedForgetsIdleKeysWhenFull(t *testing.T) {
	t.Run("the key map stays bounded when many keys come and go", func(t *testing.T) {
		clock := time.Unix(1_700_000_000, 0)
		r := NewRateLimited(time.Minute)
		r.now = func() time.Time { return clock }
		for i := range 3 * maxLimitedKeys {
			clock = clock.Add(time.Second)
			r.Allow(string(rune('a'+i%26)) + time.Duration(i).String())
		}
		if n := len(r.keys); n > maxLimitedKeys {
			t.Errorf("%d keys kept, want at most %d", n, maxLimitedKeys)
		}
	})
}
