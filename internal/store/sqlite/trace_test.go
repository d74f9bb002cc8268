package sqlite

import (
	"context"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/store"
)

func TestTraceFindsWhatOneRequestCausedWithinItsTeam(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	a, b := newTeam(t, db, "a"), newTeam(t, db, "b")
	now := time.Now().UTC().Truncate(time.Microsecond)
	if err := db.InsertLogs(ctx, []store.LogLine{
		{Time: now, SandboxID: "s1", TeamID: a.ID, Level: "info", Source: store.SourceEnvd, RequestID: "r1", Message: "stream end"},
		{Time: now, SandboxID: "s1", TeamID: a.ID, Level: "info", Source: store.SourceEnvd, RequestID: "r2", Message: "other"},
		{Time: now, SandboxID: "s9", TeamID: b.ID, Level: "info", Source: store.SourceEnvd, RequestID: "r1", Message: "another team"},
	}); err != nil {
		t.Fatal(err)
	}
	code := 0
	for _, c := range []*store.CommandRecord{
		{SandboxID: "s1", TeamID: a.ID, PID: 5, RequestID: "r0", SignalRequestID: "r1", StartedAt: now, Command: "sleep"},
		{SandboxID: "s1", TeamID: a.ID, PID: 6, RequestID: "r1", StartedAt: now, Command: "echo", ExitCode: &code},
	} {
		if err := db.UpsertCommand(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.InsertEvent(ctx, &store.Event{ID: "e1", Type: "sandbox.lifecycle.killed", Timestamp: now, SandboxID: "s1",
		TeamID: a.ID, RequestID: "r1", Data: []byte(`{"kill_reason":"request"}`)}); err != nil {
		t.Fatal(err)
	}
	lines, err := db.TraceLogs(ctx, a.ID, "r1", 0)
	if err != nil || len(lines) != 1 || lines[0].Message != "stream end" {
		t.Errorf("trace logs: %v %+v", err, lines)
	}
	cmds, err := db.TraceCommands(ctx, a.ID, "r1", 0)
	if err != nil || len(cmds) != 2 {
		t.Errorf("trace commands (started by r1, and signalled by r1): %v %d", err, len(cmds))
	}
	evs, err := db.TraceEvents(ctx, a.ID, "r1", 0)
	if err != nil || len(evs) != 1 {
		t.Errorf("trace events: %v %d", err, len(evs))
	}
	if lines, _ := db.TraceLogs(ctx, b.ID, "r2", 0); len(lines) != 0 {
		t.Errorf("another team's trace found %+v", lines)
	}
}
