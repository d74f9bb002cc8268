package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
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
