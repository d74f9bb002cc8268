package logs

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/store"
	cove "github.com/cove-dev/cove/sdk"
)

func TestATeamsLinesShareAnHourlyByteBudget(t *testing.T) {
	db := newDB(t)
	clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	var told []string
	in := NewIngester(db, Config{MaxLinesPerSecPerSandbox: -1, MaxBytesPerMinutePerSandbox: -1, MaxBytesPerHourPerTeam: 100, Now: clk.Now,
		OnLimit: func(team, sandboxID, templateID, limit, detail string) {
			told = append(told, team+"/"+sandboxID+"/"+limit)
		}})
	for range 6 {
		for _, sb := range []string{"sb1", "sb2"} {
			in.Add(store.LogLine{SandboxID: sb, TeamID: "loud", Message: "0123456789"})
		}
	}
	in.Add(store.LogLine{SandboxID: "sb3", TeamID: "quiet", Message: "0123456789"})
	t.Run("past the budget a team's lines are dropped and counted, from any of its sandboxes", func(t *testing.T) {
		if got := in.Dropped("sb1") + in.Dropped("sb2"); got != 2 {
			t.Errorf("dropped %d, want 2", got)
		}
	})
	t.Run("another team is not charged", func(t *testing.T) {
		if got := in.Dropped("sb3"); got != 0 {
			t.Errorf("dropped %d of the quiet team", got)
		}
	})
	t.Run("each dropped line is told to the team's limit events (which sample)", func(t *testing.T) {
		if want := []string{"loud/sb1/" + cove.LimitTeamLogBytes, "loud/sb2/" + cove.LimitTeamLogBytes}; strings.Join(told, " ") != strings.Join(want, " ") {
			t.Errorf("told %v, want %v", told, want)
		}
	})
	clk.Add(time.Hour)
	in.Add(store.LogLine{SandboxID: "sb1", TeamID: "loud", Message: "0123456789"})
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	t.Run("the next hour takes lines again", func(t *testing.T) {
		if n := count(t, db, "loud", ""); n != 11 {
			t.Errorf("stored %d of the loud team, want 10 and 1", n)
		}
	})
}

func TestParsedFieldsCountAndAreBounded(t *testing.T) {
	db := newDB(t)
	in := NewIngester(db, Config{MaxLinesPerSecPerSandbox: -1, MaxBytesPerMinutePerSandbox: 200, MaxLineBytes: 64, FlushInterval: time.Hour})
	in.Add(store.LogLine{SandboxID: "sb", TeamID: "team", Message: "big", Fields: map[string]any{"blob": strings.Repeat("x", 1000)}})
	for range 5 { // 3 bytes of message and 38 of fields each
		in.Add(store.LogLine{SandboxID: "sb", TeamID: "team", Message: "abc", Fields: map[string]any{"k": strings.Repeat("y", 30)}})
	}
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	page, err := db.QueryLogs(context.Background(), store.LogQuery{TeamID: "team", SandboxID: "sb"})
	if err != nil {
		t.Fatal(err)
	}
	t.Run("fields longer than a line are dropped, saying how long they were", func(t *testing.T) {
		var big *store.LogLine
		for i := range page.Lines {
			if page.Lines[i].Message == "big" {
				big = &page.Lines[i]
			}
		}
		if big == nil || big.Fields["blob"] != nil || big.Fields["fields.dropped_bytes"] == nil {
			t.Fatalf("the big line: %+v", big)
		}
	})
	t.Run("field bytes count against the sandbox's byte budget", func(t *testing.T) {
		if got := in.Dropped("sb"); got != 1 {
			t.Errorf("dropped %d, want 1: four lines of 41 bytes and the big one fit 200", got)
		}
	})
}

func TestBelowTheDisksFreeSpaceFloorLinesAreDroppedNotWritten(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounts a small tmpfs: needs root")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=4m"); err != nil {
		t.Skipf("mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	filler := filepath.Join(dir, "filler")
	if err := os.WriteFile(filler, make([]byte, 3<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	db := newDB(t)
	var logs syncBuffer
	dropped := counterValue(t, telemetry.LogLinesDropped.WithLabelValues(dropDisk))
	var (
		toldMu sync.Mutex
		told   []string
	)
	in := NewIngester(db, Config{MaxLinesPerSecPerSandbox: -1, DataDir: dir, MinFreeBytes: 2 << 20, FlushInterval: 10 * time.Millisecond,
		Logger: slog.New(slog.NewJSONHandler(&logs, nil)), OnLimit: func(team, sandboxID, templateID, limit, detail string) {
			toldMu.Lock()
			defer toldMu.Unlock()
			told = append(told, team+"/"+sandboxID+"/"+limit)
		}})
	for range 10 {
		in.Add(store.LogLine{SandboxID: "sb", TeamID: "team", Message: "while full"})
	}
	waitFor(t, func() bool { return in.Dropped("sb") == 10 })
	t.Run("the lines are dropped and counted, on /metrics too", func(t *testing.T) {
		if n := count(t, db, "team", "sb"); n != 0 {
			t.Errorf("stored %d lines below the floor", n)
		}
		if got := counterValue(t, telemetry.LogLinesDropped.WithLabelValues(dropDisk)) - dropped; got != 10 {
			t.Errorf("cove_log_lines_dropped{reason=disk_floor} grew by %v, want 10", got)
		}
	})
	t.Run("the drops are told to the team's limit events", func(t *testing.T) {
		toldMu.Lock()
		defer toldMu.Unlock()
		if len(told) == 0 || told[0] != "team/sb/"+cove.LimitHostLogDisk {
			t.Errorf("told %v", told)
		}
	})
	t.Run("crossing the floor is logged once", func(t *testing.T) {
		if c := strings.Count(logs.String(), "below its free-space floor"); c != 1 {
			t.Errorf("%d floor lines:\n%s", c, logs.String())
		}
	})
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { // a flush sees the space again
		in.mu.Lock()
		defer in.mu.Unlock()
		return !in.lowDisk
	})
	in.Add(store.LogLine{SandboxID: "sb", TeamID: "team", Message: "with room"})
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	t.Run("with room again lines are written", func(t *testing.T) {
		if n := count(t, db, "team", "sb"); n != 1 {
			t.Errorf("stored %d, want the line added with room", n)
		}
	})
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
