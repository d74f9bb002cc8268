package server

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/cove-dev/cove/internal/builder/template/build"
	"github.com/cove-dev/cove/internal/store"
)

// buildLogReads is the store as the log readers see it (the logs API, the console): a query
// for one sandbox id that is a template build of the team reads that build's log, which
// lives with the build's record (store.TemplateBuilds) and nowhere else. So a build's log is
// searched as a sandbox's is (GET /v2/sandboxes/{buildID}/logs?search=...) and the console
// tails it alike.
type buildLogReads struct {
	store.DB
	builds *build.Builds
}

// QueryLogs answers a query of a build's log from the build, any other from the log store.
func (s buildLogReads) QueryLogs(ctx context.Context, q store.LogQuery) (*store.LogPage, error) {
	b := s.builds
	if b == nil || q.SandboxID == "" || (q.Source != "" && q.Source != store.SourceBuild) {
		return s.DB.QueryLogs(ctx, q)
	}
	rec, err := b.Get(q.SandboxID)
	if err != nil || rec.TeamID != q.TeamID {
		return s.DB.QueryLogs(ctx, q) // no build of the team's: a sandbox's, or none
	}
	return buildLogPage(rec, b.Logs(rec, 0), q)
}

// TraceLogs is the log store's lines of the request, and the log lines of the team's builds
// it asked for: a build's log takes part in its request's trace.
func (s buildLogReads) TraceLogs(ctx context.Context, teamID, requestID string, limit int) ([]store.LogLine, error) {
	lines, err := s.DB.TraceLogs(ctx, teamID, requestID, limit)
	if err != nil || s.builds == nil || requestID == "" {
		return lines, err
	}
	recs, err := s.builds.List("")
	if err != nil {
		return nil, err
	}
	for _, rec := range recs {
		if rec.RequestID != requestID || rec.TeamID != teamID {
			continue
		}
		page, err := buildLogPage(rec, s.builds.Logs(rec, 0), store.LogQuery{Limit: math.MaxInt})
		if err != nil {
			return nil, err
		}
		lines = append(lines, page.Lines...)
	}
	slices.SortStableFunc(lines, func(a, b store.LogLine) int { return a.Time.Compare(b.Time) })
	if limit > 0 && len(lines) > limit {
		lines = lines[:limit]
	}
	return lines, nil
}

// buildLogPage is the page of build rec's log, entries, that q selects: a line's position is
// its time and its number in the log.
func buildLogPage(rec *build.BuildRecord, entries []build.LogEntry, q store.LogQuery) (*store.LogPage, error) {
	minRank := 0
	if q.MinLevel != "" {
		r, ok := store.LogLevelRank(q.MinLevel)
		if !ok {
			return nil, fmt.Errorf("%w: query logs: unknown level %q", store.ErrInvalid, q.MinLevel)
		}
		minRank = r
	}
	var terms []string
	for _, t := range store.SearchTerms(q.Search) {
		terms = append(terms, strings.ToLower(t))
	}
	keep := func(i int, e build.LogEntry) bool {
		if rank, _ := store.LogLevelRank(e.Level); rank < minRank {
			return false
		}
		if (!q.Since.IsZero() && e.Time.Before(q.Since)) || (!q.Until.IsZero() && !e.Time.Before(q.Until)) {
			return false
		}
		if !q.Cursor.IsZero() {
			ms, at := e.Time.UnixMilli(), q.Cursor.UnixMilli()
			if (!q.Backward && ms < at) || (q.Backward && ms > at) {
				return false
			}
		}
		if q.After != nil && ((!q.Backward && int64(i) <= q.After.Seq) || (q.Backward && int64(i) >= q.After.Seq)) {
			return false
		}
		if (q.RequestID != "" && q.RequestID != rec.RequestID) || q.Stream != "" || q.PID != 0 ||
			(q.TemplateID != "" && q.TemplateID != rec.Template) || (q.SandboxIn != nil && !slices.Contains(q.SandboxIn, rec.ID)) {
			return false
		}
		for k, v := range q.Fields {
			if (k != "build.id" || v != rec.ID) && (k != "build.step" || v != e.Step) {
				return false
			}
		}
		msg := strings.ToLower(e.Message)
		for _, t := range terms {
			if !strings.Contains(msg, t) {
				return false
			}
		}
		return true
	}
	limit := q.Limit
	if limit <= 0 {
		limit = 1000
	}
	page := &store.LogPage{}
	var last store.LogPosition
	for n := range len(entries) {
		i := n
		if q.Backward {
			i = len(entries) - 1 - n
		}
		e := entries[i]
		if !keep(i, e) {
			continue
		}
		pos := store.LogPosition{Time: e.Time, Seq: int64(i)}
		if len(page.Lines) == limit {
			page.Next = &last
			break
		}
		page.Lines = append(page.Lines, store.LogLine{Time: e.Time, SandboxID: rec.ID, TeamID: rec.TeamID, TemplateID: rec.Template,
			Level: e.Level, Source: store.SourceBuild, RequestID: rec.RequestID, Message: e.Message,
			Fields: map[string]any{"build.id": rec.ID, "build.step": e.Step}})
		if page.First == nil {
			first := pos
			page.First = &first
		}
		last = pos
		l := last
		page.Last = &l
	}
	return page, nil
}
