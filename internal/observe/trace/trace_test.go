package trace_test

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/observe/trace"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/store/sqlite"
	"github.com/cove-dev/cove/sdk/reason"
)

func openDB(t *testing.T) *sqlite.DB {
	t.Helper()
	db, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "cove.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func newTeam(t *testing.T, db *sqlite.DB, name string) string {
	t.Helper()
	team, err := db.CreateTeam(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return team.ID
}

// teeLines is a logger whose lines go through the tee into a slice, as cove server's go to
// the log store.
type teeLines struct {
	mu    sync.Mutex
	lines []store.LogLine
	out   bytes.Buffer
}

func (s *teeLines) add(l store.LogLine) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lines = append(s.lines, l)
}

func (s *teeLines) logger(teamOf func(string) string) *slog.Logger {
	return slog.New(trace.Tee(slog.NewJSONHandler(&s.out, &slog.HandlerOptions{Level: slog.LevelDebug}), s.add, teamOf))
}

func TestTheTimelineJoinsLinesEventsAndCommandsOfOneRequest(t *testing.T) {
	db := openDB(t)
	ctx := context.Background()
	team, other := newTeam(t, db, "a"), newTeam(t, db, "b")
	t0 := time.Now().UTC().Truncate(time.Millisecond)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

	// The server's own line about the sandbox, through the tee, as cove server logs it.
	tee := &teeLines{}
	tee.logger(func(string) string { return team }).Info("sandbox killed", telemetry.KeySandboxID, "s1", telemetry.KeyRequestID, "r1", telemetry.KeyKillReason, "request")
	tee.lines[0].Time = at(50)
	lines := append(tee.lines,
		store.LogLine{Time: at(10), SandboxID: "s1", TeamID: team, Level: "info", Source: store.SourceEnvd, RequestID: "r1", Message: "rpc"},
		store.LogLine{Time: at(11), SandboxID: "s1", TeamID: team, Level: "info", Source: store.SourceEnvd, RequestID: "r2", Message: "another request"},
		store.LogLine{Time: at(12), SandboxID: "s9", TeamID: other, Level: "info", Source: store.SourceEnvd, RequestID: "r1", Message: "another team"},
	)
	if err := db.InsertLogs(ctx, lines); err != nil {
		t.Fatal(err)
	}
	zero, one := 0, 1
	for _, c := range []*store.CommandRecord{
		// Started by r1, exited 0.
		{SandboxID: "s1", TeamID: team, PID: 6, RequestID: "r1", Command: "echo hi", User: "user", Cwd: "/home/user",
			StartedAt: at(20), EndedAt: at(25), ExitCode: &zero, EndCause: reason.EndExited},
		// Started by r0, killed by r1's signal: only its end belongs to r1.
		{SandboxID: "s1", TeamID: team, PID: 5, RequestID: "r0", SignalRequestID: "r1", Command: "sleep 60",
			StartedAt: at(1), EndedAt: at(30), Signal: "SIGKILL", EndCause: reason.EndKilled},
		// Started by r1, still running.
		{SandboxID: "s1", TeamID: team, PID: 7, RequestID: "r1", Command: "tail -f log", StartedAt: at(40)},
		// Another team's command under the same id.
		{SandboxID: "s9", TeamID: other, PID: 8, RequestID: "r1", Command: "ls", StartedAt: at(41), EndedAt: at(42), ExitCode: &one, EndCause: reason.EndExited},
	} {
		if err := db.UpsertCommand(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.InsertEvent(ctx, &store.Event{ID: "e1", Type: "sandbox.lifecycle.killed", Timestamp: at(45), SandboxID: "s1",
		TeamID: team, RequestID: "r1", Data: []byte(`{"kill_reason":"request"}`)}); err != nil {
		t.Fatal(err)
	}

	tl, err := trace.Build(ctx, db, team, "r1")
	if err != nil {
		t.Fatal(err)
	}
	want := []struct{ source, message string }{
		{"envd", "rpc"},
		{"command", "process 6 started: echo hi"},
		{"command", "process 6 exited 0 after 5ms"},
		{"command", "process 5 was killed by SIGKILL after 29ms"},
		{"command", "process 7 started: tail -f log"},
		{"event", "sandbox.lifecycle.killed"},
		{"server", "sandbox killed"},
	}
	var got []string
	for _, e := range tl.Entries {
		got = append(got, e.Source+": "+e.Message)
	}
	if len(tl.Entries) != len(want) {
		t.Fatalf("timeline:\n%s", strings.Join(got, "\n"))
	}
	for i, w := range want {
		if e := tl.Entries[i]; e.Source != w.source || e.Message != w.message {
			t.Errorf("entry %d is %s: %s, want %s: %s\n%s", i, e.Source, e.Message, w.source, w.message, strings.Join(got, "\n"))
		}
	}
	if f := tl.Entries[3].Fields; f[telemetry.KeySignalRequestID] != "r1" {
		t.Errorf("the signalled command's end does not name the signalling request: %v", f)
	}
	if f := tl.Entries[5].Fields; f["kill_reason"] != "request" {
		t.Errorf("the event's data is not in its fields: %v", f)
	}
	if f := tl.Entries[6].Fields; f[telemetry.KeyKillReason] != "request" || tl.Entries[6].SandboxID != "s1" {
		t.Errorf("the server line lost its attributes: %+v", tl.Entries[6])
	}
	if tl.RequestID != "r1" {
		t.Errorf("request id %q", tl.RequestID)
	}

	t.Run("an unknown request id has an empty timeline, not null", func(t *testing.T) {
		tl, err := trace.Build(ctx, db, team, "nope")
		if err != nil || tl.Entries == nil || len(tl.Entries) != 0 {
			t.Errorf("timeline %+v, err %v", tl, err)
		}
	})
}

func TestACommandsEndReadsAsASentence(t *testing.T) {
	db := openDB(t)
	ctx := context.Background()
	team := newTeam(t, db, "a")
	t0 := time.Now().UTC().Truncate(time.Millisecond)
	three := 3
	tests := []struct {
		name string
		rec  store.CommandRecord
		want string
	}{
		{"an exit says its code", store.CommandRecord{ExitCode: &three, EndCause: reason.EndExited}, "process 1 exited 3 after 1s"},
		{"a deadline says so", store.CommandRecord{Signal: "SIGKILL", EndCause: reason.EndTimeout}, "process 2 was killed at its deadline after 1s"},
		{"a signal names it", store.CommandRecord{Signal: "SIGTERM", EndCause: reason.EndKilled}, "process 3 was killed by SIGTERM after 1s"},
		{"a sandbox kill names its reason", store.CommandRecord{EndCause: reason.EndSandboxKilled, KillReason: "timeout"}, "process 4 ended with its sandbox (timeout) after 1s"},
		{"another end gives its cause", store.CommandRecord{EndCause: reason.EndOOMKilled}, "process 5 oom_killed after 1s"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := tt.rec
			rec.SandboxID, rec.TeamID, rec.PID, rec.RequestID, rec.Command = "s1", team, i+1, "r-"+tt.name, "cmd"
			rec.StartedAt, rec.EndedAt = t0, t0.Add(time.Second)
			if err := db.UpsertCommand(ctx, &rec); err != nil {
				t.Fatal(err)
			}
			tl, err := trace.Build(ctx, db, team, rec.RequestID)
			if err != nil || len(tl.Entries) != 2 {
				t.Fatalf("timeline %+v, err %v", tl, err)
			}
			if got := tl.Entries[1].Message; got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestTheTeeKeepsOnlyLinesAboutASandboxAndARequest(t *testing.T) {
	tests := []struct {
		name  string
		log   func(l *slog.Logger)
		want  int
		check func(t *testing.T, l store.LogLine)
	}{
		{"a line with sandbox, team and request is kept", func(l *slog.Logger) {
			l.Warn("proxy error", telemetry.KeySandboxID, "s1", telemetry.KeyTeamID, "t1", telemetry.KeyRequestID, "r1", telemetry.KeyTemplateID, "base", "port", 8000)
		}, 1, func(t *testing.T, l store.LogLine) {
			if l.Level != "warn" || l.TeamID != "t1" || l.TemplateID != "base" || l.Source != store.SourceServer || l.Fields["port"] != "8000" {
				t.Errorf("line %+v", l)
			}
		}},
		{"a line without a request id is not kept", func(l *slog.Logger) { l.Info("tick", telemetry.KeySandboxID, "s1", telemetry.KeyTeamID, "t1") }, 0, nil},
		{"a line without a sandbox is not kept", func(l *slog.Logger) { l.Info("listening", telemetry.KeyRequestID, "r1") }, 0, nil},
		{"a line without a team takes the sandbox's", func(l *slog.Logger) {
			l.Error("dial failed", telemetry.KeySandboxID, "s1", telemetry.KeyRequestID, "r1")
		}, 1, func(t *testing.T, l store.LogLine) {
			if l.TeamID != "team-of-s1" || l.Level != "error" {
				t.Errorf("line %+v", l)
			}
		}},
		{"attributes from With count, and a group keeps the line", func(l *slog.Logger) {
			l.With(telemetry.KeySandboxID, "s1", telemetry.KeyRequestID, "r1").WithGroup("g").Debug("step", "n", 1)
		}, 1, func(t *testing.T, l store.LogLine) {
			if l.Level != "debug" || l.SandboxID != "s1" || l.RequestID != "r1" {
				t.Errorf("line %+v", l)
			}
		}},
		{"a line of an unknown sandbox without a team is not kept", func(l *slog.Logger) {
			l.Info("x", telemetry.KeySandboxID, "gone", telemetry.KeyRequestID, "r1")
		}, 0, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tee := &teeLines{}
			l := tee.logger(func(id string) string {
				if id == "s1" {
					return "team-of-s1"
				}
				return ""
			})
			tt.log(l)
			if len(tee.lines) != tt.want {
				t.Fatalf("kept %d lines, want %d: %+v", len(tee.lines), tt.want, tee.lines)
			}
			if tt.check != nil {
				tt.check(t, tee.lines[0])
			}
			if tee.out.Len() == 0 {
				t.Error("the line did not reach the next handler")
			}
		})
	}
	t.Run("the tee is enabled as its next handler is", func(t *testing.T) {
		h := trace.Tee(slog.NewJSONHandler(&bytes.Buffer{}, &slog.HandlerOptions{Level: slog.LevelWarn}), func(store.LogLine) {}, nil)
		if h.Enabled(context.Background(), slog.LevelInfo) || !h.Enabled(context.Background(), slog.LevelError) {
			t.Error("enabled does not follow the next handler")
		}
	})
}
