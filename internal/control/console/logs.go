package console

import (
	"context"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/cove-dev/cove/internal/control/api/teamroutes"
	"github.com/cove-dev/cove/internal/store"
)

// pageSearchLines is how many lines one page of the Logs page shows.
const pageSearchLines = 200

// logView is the log filter a page shows in its form: text, one field, and on the Logs
// page the template, sandbox, metadata, level and time range.
type logView struct {
	Q, Field, Level, Template, Sandbox, Meta, Since, Until, TZ, Team string
	meta                                                             map[string]string // Meta parsed
}

// logQuery turns the form's values into a store query, parsing what the logs API parses
// (search, level, fields.<key>, cursor, direction, limit) with the API's own code, so the
// console and the API answer the same query the same way.
func logQuery(v url.Values) (store.LogQuery, logView, error) {
	lv := logView{Q: v.Get("q"), Field: strings.TrimSpace(v.Get("field")), Level: v.Get("level"), Template: strings.TrimSpace(v.Get("template")),
		Sandbox: strings.TrimSpace(v.Get("sandbox")), Meta: strings.TrimSpace(v.Get("meta")), Since: v.Get("since"), Until: v.Get("until"),
		TZ: v.Get("tz"), Team: v.Get("team")}
	api := url.Values{"search": {lv.Q}, "level": {lv.Level}, "limit": {v.Get("limit")}, "cursor": {v.Get("cursor")}, "direction": {v.Get("direction")}}
	if lv.Field != "" {
		k, val, ok := strings.Cut(lv.Field, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return store.LogQuery{}, lv, fmt.Errorf("field: %q is not key=value", lv.Field)
		}
		api.Set("fields."+strings.TrimSpace(k), strings.TrimSpace(val))
	}
	if lv.Meta != "" {
		lv.meta = map[string]string{}
		for pair := range strings.SplitSeq(lv.Meta, ",") {
			k, val, ok := strings.Cut(pair, "=")
			if !ok || strings.TrimSpace(k) == "" {
				return store.LogQuery{}, lv, fmt.Errorf("meta: %q is not key=value", pair)
			}
			lv.meta[strings.TrimSpace(k)] = strings.TrimSpace(val)
		}
	}
	for k, vals := range api {
		if len(vals) == 0 || vals[0] == "" {
			delete(api, k)
		}
	}
	q, err := teamroutes.ParseLogQuery(api)
	if err != nil {
		return q, lv, err
	}
	q.TemplateID, q.SandboxID = lv.Template, lv.Sandbox
	offset, err := tzOffset(lv.TZ)
	if err != nil {
		return q, lv, err
	}
	if q.Since, err = parseLocal("since", lv.Since, offset); err != nil {
		return q, lv, err
	}
	if q.Until, err = parseLocal("until", lv.Until, offset); err != nil {
		return q, lv, err
	}
	if !q.Since.IsZero() && !q.Until.IsZero() && !q.Until.After(q.Since) {
		return q, lv, fmt.Errorf("until: %s is not after since %s", lv.Until, lv.Since)
	}
	return q, lv, nil
}

// tzOffset reads the browser's getTimezoneOffset() (minutes behind UTC); "" is UTC.
func tzOffset(v string) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < -14*60 || n > 14*60 {
		return 0, fmt.Errorf("tz: %q is not a time zone offset in minutes", v)
	}
	return time.Duration(n) * time.Minute, nil
}

// parseLocal reads a datetime-local value (the viewer's wall clock, offset minutes behind
// UTC) or an RFC 3339 time; "" is no bound.
func parseLocal(field, v string, offset time.Duration) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	for _, layout := range []string{"2006-01-02T15:04", "2006-01-02T15:04:05"} {
		if t, err := time.Parse(layout, v); err == nil {
			return t.Add(offset), nil
		}
	}
	return time.Time{}, fmt.Errorf("%s: %q is not a date and time (2026-12-04T07:30)", field, v)
}

// logsPage searches the log lines of every sandbox of the viewer's team (an admin picks
// the team): text, one field, metadata, level, template, sandbox and time range, newest
// first, pages of pageSearchLines.
func (c *Console) logsPage(w http.ResponseWriter, r *http.Request) {
	s := sessionOf(r)
	q, lv, err := logQuery(r.URL.Query())
	if err != nil {
		c.fail(w, r, http.StatusBadRequest, err)
		return
	}
	data := map[string]any{"Title": "Logs", "View": lv, "Levels": store.LogLevels}
	team, teams, err := c.teamOf(r.Context(), s, lv.Team)
	if err != nil {
		c.fail(w, r, statusOf(err), err)
		return
	}
	data["Teams"], data["Team"] = teams, team
	if team == "" { // an admin on a server without teams
		c.render(w, r, "logs.html", data)
		return
	}
	q.TeamID, q.Backward = team, true
	if q.Limit == 0 || r.URL.Query().Get("limit") == "" {
		q.Limit = pageSearchLines
	}
	if lv.meta != nil {
		// Metadata lives with the sandbox, not on its lines: the search keeps the lines of
		// the team's sandboxes (killed ones too) whose metadata matches.
		if q.SandboxIn, err = c.sandboxesWith(r.Context(), team, lv.meta); err != nil {
			c.fail(w, r, statusOf(err), err)
			return
		}
	}
	page, err := c.cfg.Records.QueryLogs(r.Context(), q)
	if err != nil {
		c.fail(w, r, statusOf(err), fmt.Errorf("search logs: %w", err))
		return
	}
	data["Logs"] = page.Lines
	if page.Next != nil {
		next := r.URL.Query()
		next.Set("cursor", teamroutes.EncodeLogCursor(*page.Next))
		next.Del("direction")
		data["Next"] = template.URL(next.Encode()) // url.Values.Encode: a safe query
	}
	c.render(w, r, "logs.html", data)
}

// maxMetaSandboxes bounds how many sandboxes a metadata search of the logs covers.
const maxMetaSandboxes = 1000

// sandboxesWith returns the ids of team's sandboxes, in every state, whose metadata holds
// every pair of md: at most maxMetaSandboxes, the newest.
func (c *Console) sandboxesWith(ctx context.Context, team string, md map[string]string) ([]string, error) {
	ids := []string{}
	f := store.SandboxFilter{TeamID: team, Metadata: md, Limit: 100,
		States: []store.SandboxState{store.StateRunning, store.StatePaused, store.StateKilled}}
	for len(ids) < maxMetaSandboxes {
		page, err := c.cfg.Records.ListSandboxes(ctx, f)
		if err != nil {
			return nil, fmt.Errorf("sandboxes with metadata: %w", err)
		}
		for _, sb := range page.Sandboxes {
			ids = append(ids, sb.ID)
		}
		if page.Next == "" {
			break
		}
		f.Next = page.Next
	}
	return ids, nil
}

// teamOf is the team a viewer's query reads: the session's own, or for the admin the one
// asked for (the first team when none is), with the teams to choose from.
func (c *Console) teamOf(ctx context.Context, s *session, asked string) (string, []*store.Team, error) {
	if !s.admin() {
		if asked != "" && asked != s.TeamID {
			return "", nil, fmt.Errorf("team %s: %w", asked, store.ErrNotFound)
		}
		return s.TeamID, nil, nil
	}
	teams, err := c.cfg.Keys.ListTeams(ctx)
	if err != nil {
		return "", nil, fmt.Errorf("list teams: %w", err)
	}
	for _, t := range teams {
		if t.ID == asked {
			return asked, teams, nil
		}
	}
	if asked != "" {
		return "", nil, fmt.Errorf("team %s: %w", asked, store.ErrNotFound)
	}
	if len(teams) == 0 {
		return "", nil, nil
	}
	return teams[0].ID, teams, nil
}

// tail streams a sandbox's new log lines (those matching the page's text and field
// search) as Server-Sent Events: each "lines" event is the rows, newest first, of the
// lines stored after the last one shown, starting after cursor (the page's newest line).
func (c *Console) tail(w http.ResponseWriter, r *http.Request) {
	s := sessionOf(r)
	sb, err := c.find(r.Context(), s, r.PathValue("id"))
	if err != nil {
		c.fail(w, r, statusOf(err), err)
		return
	}
	c.tailLogs(w, r, sb.TeamID, sb.ID, nil)
}

// tailLogs streams the new log lines of id (a sandbox, or a template build) of team. When
// done is set and says so at a round without new lines, a last "done" event ends the stream.
func (c *Console) tailLogs(w http.ResponseWriter, r *http.Request, team, id string, done func() (bool, error)) {
	v := r.URL.Query()
	// A browser that reconnects names the last event it got: continue after its lines,
	// not after the page's, so no line shows twice.
	if last := r.Header.Get("Last-Event-ID"); last != "" {
		v.Set("cursor", last)
	}
	v.Del("direction")
	v.Del("limit")
	v.Del("sandbox")
	q, _, err := logQuery(v)
	if err != nil {
		c.fail(w, r, http.StatusBadRequest, err)
		return
	}
	q.TeamID, q.SandboxID, q.Limit = team, id, pageLogLines
	c.stream(w, r, func(ctx context.Context) (sse, error) {
		page, err := c.cfg.Records.QueryLogs(ctx, q)
		if err != nil {
			return sse{}, fmt.Errorf("tail logs of %s: %w", id, err)
		}
		if len(page.Lines) == 0 {
			if done == nil {
				return sse{}, nil
			}
			end, err := done()
			if err != nil || !end {
				return sse{}, err
			}
			return sse{Event: "done", Data: id, Last: true}, nil
		}
		q.After, q.Cursor = page.Last, time.Time{}
		rows := make([]store.LogLine, len(page.Lines))
		for i, l := range page.Lines { // newest first, as the page lists them
			rows[len(rows)-1-i] = l
		}
		var b strings.Builder
		if err := c.pages.ExecuteTemplate(&b, "logrows", map[string]any{"Logs": rows}); err != nil {
			return sse{}, fmt.Errorf("render log lines: %w", err)
		}
		return sse{Event: "lines", ID: teamroutes.EncodeLogCursor(*q.After), Data: b.String()}, nil
	})
}

// sse is one Server-Sent Event; the zero sse is none.
type sse struct {
	Event string
	ID    string // when set, the browser sends it back as Last-Event-ID on reconnecting
	Data  string
	Last  bool // the stream ends after it
}

// stream answers with Server-Sent Events: next is called at once and then every liveEvery
// until the viewer leaves or the console closes; each event it returns is sent. An error is
// sent as a "failure" event naming the request id, and ends the stream.
func (c *Console) stream(w http.ResponseWriter, r *http.Request, next func(ctx context.Context) (sse, error)) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		c.fail(w, r, http.StatusInternalServerError, errors.New("live: this connection cannot stream"))
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	flusher.Flush()
	tick := time.NewTicker(liveEvery)
	defer tick.Stop()
	for {
		ev, err := next(r.Context())
		if err != nil {
			if r.Context().Err() == nil {
				fmt.Fprintf(w, "event: failure\ndata: %s (request %s)\n\n", strings.ReplaceAll(err.Error(), "\n", " "), requestID(r))
				flusher.Flush()
			}
			return
		}
		if ev.Event != "" {
			fmt.Fprintf(w, "event: %s\n", ev.Event)
			if ev.ID != "" {
				fmt.Fprintf(w, "id: %s\n", ev.ID)
			}
			for line := range strings.SplitSeq(ev.Data, "\n") {
				fmt.Fprintf(w, "data: %s\n", line)
			}
			fmt.Fprint(w, "\n")
			flusher.Flush()
			if ev.Last {
				return
			}
		}
		select {
		case <-r.Context().Done():
			return
		case <-c.closed:
			return
		case <-tick.C:
		}
	}
}

// tailQuery is the query of a sandbox page's live tail: its search, continuing after the
// page's newest line (from the start when the page showed none).
func tailQuery(lv logView, newest *store.LogPosition) string {
	v := url.Values{}
	if lv.Q != "" {
		v.Set("q", lv.Q)
	}
	if lv.Field != "" {
		v.Set("field", lv.Field)
	}
	if newest != nil {
		v.Set("cursor", teamroutes.EncodeLogCursor(*newest))
	}
	return v.Encode()
}
