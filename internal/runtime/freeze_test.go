package runtime

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cove-dev/cove/internal/telemetry"
)

// fakeRunc writes a runc stand-in whose pause fails with runc's "unable to freeze" the
// first fails times (counted in a file), then succeeds. runc's freezer gives up that way
// only under load, which a test cannot bring about on cue.
func fakeRunc(t *testing.T, fails int) (path, count string) {
	t.Helper()
	dir := t.TempDir()
	path, count = filepath.Join(dir, "runc"), filepath.Join(dir, "count")
	script := fmt.Sprintf(`#!/bin/sh
n=$(cat %[1]q 2>/dev/null || echo 0); n=$((n+1)); echo $n > %[1]q
if [ "$n" -le %[2]d ]; then
  echo 'level=error msg="unable to freeze"' >&2; exit 1
fi
`, count, fails)
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path, count
}

func TestFreezeTriesAgainWhenTheFreezerGivesUp(t *testing.T) {
	var logs bytes.Buffer
	ctx := telemetry.WithLogger(context.Background(), telemetry.NewLogger(&logs, slog.LevelInfo))

	runc, count := fakeRunc(t, 2)
	r := &Runc{cfg: Config{RuncPath: runc, RuncRoot: t.TempDir()}, locks: map[string]*idLock{}}
	if err := r.Freeze(ctx, "sb1"); err != nil {
		t.Fatalf("freeze after two failed tries: %v", err)
	}
	if b, _ := os.ReadFile(count); strings.TrimSpace(string(b)) != "3" {
		t.Errorf("runc pause ran %s times, want 3", b)
	}
	if n := strings.Count(logs.String(), "freeze did not take"); n != 2 {
		t.Errorf("%d retry lines, want 2: %s", n, logs.String())
	}

	runc, _ = fakeRunc(t, 9)
	r = &Runc{cfg: Config{RuncPath: runc, RuncRoot: t.TempDir()}, locks: map[string]*idLock{}}
	err := r.Freeze(ctx, "sb2")
	if err == nil || !strings.Contains(err.Error(), "unable to freeze") || !strings.Contains(err.Error(), "try 5") {
		t.Errorf("freeze that never takes: %v, want the runc error after 5 tries", err)
	}
}
