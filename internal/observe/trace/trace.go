// Package trace answers "what happened to request X?": it merges every line, event and
// command record Cove stored under one request id into one timeline, and tees cove server's
// own log lines about sandboxes into the log store so they take part.
package trace

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/store"
	cove "github.com/cove-dev/cove/sdk"
	"github.com/cove-dev/cove/sdk/reason"
)

// Entry is one step of a request's timeline (the SDK's type, which the API emits).
type Entry = cove.TraceEntry

// Timeline is everything stored under one request id, oldest first.
type Timeline = cove.Trace

// Build gathers the team's timeline for requestID.
func Build(ctx context.Context, st store.TraceStore, teamID, requestID string) (*Timeline, error) {
	tl := &Timeline{RequestID: requestID, Entries: []Entry{}}
	lines, err := st.TraceLogs(ctx, teamID, requestID, 0)
	if err != nil {
		return nil, err
	}
	for _, l := range lines {
		tl.Entries = append(tl.Entries, Entry{Time: l.Time, Source: l.Source, SandboxID: l.SandboxID, Level: l.Level, Message: l.Message, Fields: l.Fields})
	}
	evs, err := st.TraceEvents(ctx, teamID, requestID, 0)
	if err != nil {
		return nil, err
	}
	for _, ev := range evs {
		var data map[string]any
		_ = json.Unmarshal(ev.Data, &data)
		tl.Entries = append(tl.Entries, Entry{Time: ev.Timestamp, Source: "event", SandboxID: ev.SandboxID, Level: "info", Message: ev.Type, Fields: data})
	}
	cmds, err := st.TraceCommands(ctx, teamID, requestID, 0)
	if err != nil {
		return nil, err
	}
	for _, c := range cmds {
		if c.RequestID == requestID {
			tl.Entries = append(tl.Entries, Entry{Time: c.StartedAt, Source: "command", SandboxID: c.SandboxID, Level: "info",
				Message: fmt.Sprintf("process %d started: %s", c.PID, c.Command), Fields: map[string]any{telemetry.KeyPID: c.PID, telemetry.KeyUser: c.User, telemetry.KeyCwd: c.Cwd}})
		}
		if c.EndedAt.IsZero() {
			continue
		}
		f := map[string]any{telemetry.KeyPID: c.PID, telemetry.KeyEndCause: c.EndCause, telemetry.KeyDurationMS: c.Duration.Milliseconds()}
		msg := fmt.Sprintf("process %d %s after %s", c.PID, ended(c), c.Duration.Round(time.Millisecond))
		if c.SignalRequestID != "" {
			f[telemetry.KeySignalRequestID] = c.SignalRequestID
		}
		if c.KillReason != "" {
			f[telemetry.KeyKillReason] = c.KillReason.String()
		}
		tl.Entries = append(tl.Entries, Entry{Time: c.EndedAt, Source: "command", SandboxID: c.SandboxID, Level: "info", Message: msg, Fields: f})
	}
	sort.SliceStable(tl.Entries, func(i, j int) bool { return tl.Entries[i].Time.Before(tl.Entries[j].Time) })
	return tl, nil
}

func ended(c *store.CommandRecord) string {
	switch {
	case c.EndCause == reason.EndSandboxKilled:
		return "ended with its sandbox (" + c.KillReason.String() + ")"
	case c.ExitCode != nil:
		return fmt.Sprintf("exited %d", *c.ExitCode)
	case c.EndCause == reason.EndTimeout:
		return "was killed at its deadline"
	case c.Signal != "":
		return "was killed by " + c.Signal
	}
	return c.EndCause.String()
}

// Tee returns a slog handler that writes every record to next and, when the record is about
// a sandbox (it carries sandbox.id and request_id), also to the log store as a server line,
// so cove trace shows the API's, proxy's and orchestrator's steps. teamOf names the team of
// a sandbox for lines that do not carry team.id (the proxy's).
func Tee(next slog.Handler, add func(store.LogLine), teamOf func(sandboxID string) string) slog.Handler {
	return &tee{next: next, add: add, teamOf: teamOf}
}

type tee struct {
	next   slog.Handler
	add    func(store.LogLine)
	teamOf func(string) string
	attrs  []slog.Attr
}

func (t *tee) Enabled(ctx context.Context, l slog.Level) bool { return t.next.Enabled(ctx, l) }

func (t *tee) WithAttrs(as []slog.Attr) slog.Handler {
	return &tee{next: t.next.WithAttrs(as), add: t.add, teamOf: t.teamOf, attrs: append(append([]slog.Attr(nil), t.attrs...), as...)}
}

func (t *tee) WithGroup(name string) slog.Handler {
	return &tee{next: t.next.WithGroup(name), add: t.add, teamOf: t.teamOf, attrs: t.attrs}
}

func (t *tee) Handle(ctx context.Context, r slog.Record) error {
	err := t.next.Handle(ctx, r)
	line := store.LogLine{Time: r.Time, Source: store.SourceServer, Message: r.Message, Level: level(r.Level), Fields: map[string]any{}}
	take := func(a slog.Attr) {
		switch v := a.Value.Resolve().String(); a.Key {
		case telemetry.KeySandboxID:
			line.SandboxID = v
		case telemetry.KeyTeamID:
			line.TeamID = v
		case telemetry.KeyTemplateID:
			line.TemplateID = v
		case telemetry.KeyRequestID:
			line.RequestID = v
		default:
			line.Fields[a.Key] = v
		}
	}
	for _, a := range t.attrs {
		take(a)
	}
	r.Attrs(func(a slog.Attr) bool { take(a); return true })
	if line.SandboxID != "" && line.TeamID == "" && t.teamOf != nil {
		line.TeamID = t.teamOf(line.SandboxID)
	}
	if line.SandboxID != "" && line.TeamID != "" && line.RequestID != "" {
		t.add(line)
	}
	return err
}

func level(l slog.Level) string { return reason.SlogLevel(l).String() }
