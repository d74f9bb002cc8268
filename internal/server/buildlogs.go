package server

import (
	"context"
	"time"

	"github.com/cove-dev/cove/internal/logs"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/template"
)

// buildLogSink sends a template build's log lines to the log store, under the build id in
// place of a sandbox id, so they are searched as a sandbox's are
// (GET /v2/sandboxes/{buildID}/logs?search=...).
func buildLogSink(in *logs.Ingester) func(*template.BuildRecord, template.LogEntry) {
	return func(r *template.BuildRecord, e template.LogEntry) {
		in.Add(store.LogLine{Time: e.Time, SandboxID: r.ID, TeamID: r.TeamID, TemplateID: r.Template, Level: e.Level,
			Source: store.SourceBuild, RequestID: r.RequestID, Message: e.Message,
			Fields: map[string]any{"build.id": r.ID, "build.step": e.Step}})
	}
}

// buildLogReader reads a build's lines back from the log store, oldest first.
func buildLogReader(db store.LogStore) func(*template.BuildRecord) ([]template.LogEntry, error) {
	return func(r *template.BuildRecord) ([]template.LogEntry, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var out []template.LogEntry
		q := store.LogQuery{TeamID: r.TeamID, SandboxID: r.ID, Source: store.SourceBuild, Limit: 1000}
		for {
			page, err := db.QueryLogs(ctx, q)
			if err != nil {
				return out, err
			}
			for _, l := range page.Lines {
				step, _ := l.Fields["build.step"].(string)
				out = append(out, template.LogEntry{Time: l.Time, Level: l.Level, Message: l.Message, Step: step})
			}
			if page.Next == nil || len(out) >= 100_000 {
				return out, nil
			}
			q.After = page.Next
		}
	}
}
