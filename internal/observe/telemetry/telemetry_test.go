package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

func TestWithNeverRepeatsAKeyOnALine(t *testing.T) {
	var buf bytes.Buffer
	ctx := WithLogger(context.Background(), NewLogger(&buf, slog.LevelInfo))
	ctx = WithRequestID(ctx, "r1")
	ctx = With(ctx, KeySandboxID, "i1", KeyTeamID, "t1")
	ctx = With(ctx, KeySandboxID, "i1", KeyTemplateID, "base", KeyTeamID, "t1")
	ctx = WithRequestID(ctx, "r1")
	Logger(ctx).Info("x")
	line := buf.String()
	for _, k := range []string{KeySandboxID, KeyTeamID, KeyTemplateID, KeyRequestID} {
		if n := strings.Count(line, `"`+k+`"`); n != 1 {
			t.Errorf("%s appears %d times in %s", k, n, line)
		}
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(line), &m); err != nil || m[KeyTemplateID] != "base" {
		t.Errorf("line %s: %v", line, err)
	}
}

func TestWithLoggerStartsAFreshFieldSet(t *testing.T) {
	var a, b bytes.Buffer
	ctx := With(WithLogger(context.Background(), NewLogger(&a, slog.LevelInfo)), KeySandboxID, "i1")
	ctx = With(WithLogger(ctx, NewLogger(&b, slog.LevelInfo)), KeySandboxID, "i1")
	Logger(ctx).Info("x")
	if !strings.Contains(b.String(), `"sandbox.id":"i1"`) {
		t.Errorf("a new logger lost the field: %s", b.String())
	}
}

func TestRequestIDsAreUniqueAndSortable(t *testing.T) {
	prev := NewRequestID()
	seen := map[string]bool{prev: true}
	for i := 0; i < 10000; i++ {
		id := NewRequestID()
		if len(id) != 20 || seen[id] || id <= prev {
			t.Fatalf("id %q after %q: want 20 chars, unique, increasing", id, prev)
		}
		seen[id], prev = true, id
	}
}

// TestLoggerAttrsAndGroupsKeepTheirPlaces: attributes are applied when the first line is
// written (not when added), in the places slog gives them, and a logger shared by goroutines
// applies them once.
func TestLoggerAttrsAndGroupsKeepTheirPlaces(t *testing.T) {
	var buf bytes.Buffer
	l := NewLogger(&buf, slog.LevelInfo).With("a", 1).With("b", 2).WithGroup("g").With("c", 3)
	l.Info("x", "d", 4)
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	g, _ := m["g"].(map[string]any)
	if m["a"] != 1.0 || m["b"] != 2.0 || g["c"] != 3.0 || g["d"] != 4.0 || m["c"] != nil {
		t.Errorf("line %s", buf.String())
	}

	var lines bytes.Buffer // slog's handler serializes its writes
	shared := NewLogger(&lines, slog.LevelInfo).With("id", "r1")
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { shared.Info("y") })
	}
	wg.Wait()
	if n := strings.Count(lines.String(), `"id":"r1"`); n != 8 {
		t.Errorf("%d of 8 lines carry the id: %s", n, lines.String())
	}
}

// BenchmarkRequestLogger is what every envd call does with its logger when it logs nothing
// at the level set (the bench runs envd at warn): the request id, then the operation id.
func BenchmarkRequestLogger(b *testing.B) {
	ctx := WithLogger(context.Background(), NewLogger(io.Discard, slog.LevelWarn))
	for b.Loop() {
		c := With(ctx, KeyRequestID, "01m8xacdc04pj327cd0z")
		c = With(c, KeyOperationID, "6958")
		if Logger(c).Enabled(c, slog.LevelInfo) {
			b.Fatal("info is enabled at warn")
		}
	}
}
