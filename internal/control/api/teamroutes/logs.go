package teamroutes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/cove-dev/cove/internal/httpx"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/store"
	cove "github.com/cove-dev/cove/sdk"
)

// Limits of the log and command routes.
const (
	maxLogLimit         = 1000
	defaultLogLimit     = 1000
	defaultCommandLimit = 100
)

type logAPI struct{ cfg Config }

// sandboxed runs h only when the path's sandbox is the caller team's (killed ones included).
func (a *logAPI) sandboxed(h teamHandler) teamHandler {
	return func(w http.ResponseWriter, r *http.Request, team string) error {
		if a.cfg.LogSandbox != nil {
			if _, err := a.cfg.LogSandbox(r.Context(), team, r.PathValue("id")); err != nil {
				return err
			}
		}
		return h(w, r, team)
	}
}

// logRoutes are the log and command routes on cfg.Logs and cfg.Commands:
//
//	GET /v2/sandboxes/{id}/logs          E2B's {logs:[{timestamp, message, level, fields}]}, plus nextCursor
//	GET /sandboxes/{id}/logs             E2B's legacy {logs:[{timestamp, line}], logEntries}
//	GET /sandboxes/{id}/commands         command records, newest first: {commands, nextCursor}
//	GET /sandboxes/{id}/commands/{pid}   the latest record of pid
//
// The v2 listing takes cursor (unix ms, E2B's; or a nextCursor), limit (1..1000, 1000),
// direction (forward, the default, or backward), level (the lowest kept), search, any
// number of fields.<key>=<value>, request_id, source, stream and pid. The legacy one takes
// start (unix ms) and limit. The command listing takes limit (1..1000, 100) and cursor.
func logRoutes(cfg Config) []httpx.Route {
	a := &logAPI{cfg: cfg}
	return []httpx.Route{
		route("GET /v2/sandboxes/{id}/logs", a.sandboxed(a.logsV2)),
		route("GET /sandboxes/{id}/logs", a.sandboxed(a.logsLegacy)),
		route("GET /sandboxes/{id}/commands", a.sandboxed(a.listCommands)),
		route("GET /sandboxes/{id}/commands/{pid}", a.sandboxed(a.getCommand)),
	}
}

// wireLog is E2B's SandboxLogEntry, the SDK's type. Fields are strings, as E2B's are: other
// JSON values are given as their JSON text.
type wireLog = cove.LogEntry

func toWireLog(l *store.LogLine, labels map[string]string) wireLog {
	f := make(map[string]string, len(l.Fields)+len(labels)+4)
	for k, v := range l.Fields {
		if s, ok := v.(string); ok {
			f[k] = s
		} else if b, err := json.Marshal(v); err == nil {
			f[k] = string(b)
		}
	}
	// The host's labels win over a line's own fields of the same name.
	for k, v := range labels {
		f[k] = v
	}
	f["source"] = l.Source
	if l.Stream != "" {
		f["stream"] = l.Stream
	}
	if l.PID != 0 {
		f[telemetry.KeyPID] = strconv.Itoa(l.PID)
	}
	if l.RequestID != "" {
		f[telemetry.KeyRequestID] = l.RequestID
	}
	return wireLog{Timestamp: l.Time, Message: l.Message, Level: l.Level, Fields: f}
}

type logsV2Response = cove.LogPage

func (a *logAPI) logsV2(w http.ResponseWriter, r *http.Request, teamID string) error {
	q, err := ParseLogQuery(r.URL.Query())
	if err != nil {
		return err
	}
	q.TeamID, q.SandboxID = teamID, r.PathValue("id")
	labels, err := a.labels(r.Context(), teamID, q.SandboxID)
	if err != nil {
		return err
	}
	out := logsV2Response{Logs: []wireLog{}}
	// A filter on a label holds for every line of the sandbox or for none: it is decided
	// here, and only the lines' own fields go to the store.
	for k, v := range q.Fields {
		if lv, ok := labels[k]; ok {
			if lv != v {
				writeJSON(w, http.StatusOK, out)
				return nil
			}
			delete(q.Fields, k)
		}
	}
	page, err := a.cfg.Logs.QueryLogs(r.Context(), q)
	if err != nil {
		return err
	}
	for i := range page.Lines {
		out.Logs = append(out.Logs, toWireLog(&page.Lines[i], labels))
	}
	if page.Next != nil {
		tok := EncodeLogCursor(*page.Next)
		out.NextCursor = &tok
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// labels are the host's labels of sandbox id: its metadata and its id.
func (a *logAPI) labels(ctx context.Context, teamID, id string) (map[string]string, error) {
	labels := map[string]string{}
	if a.cfg.Labels != nil {
		md, err := a.cfg.Labels(ctx, teamID, id)
		if err != nil {
			return nil, err
		}
		for k, v := range md {
			labels[k] = v
		}
	}
	labels[telemetry.KeySandboxID] = id
	return labels, nil
}

// ParseLogQuery reads a log listing's parameters as GET /v2/sandboxes/{id}/logs takes them
// (limit, direction, cursor, level, search, fields.<key>, request_id, source, stream, pid),
// for other views of the same store too (the console); the caller sets the team and sandbox.
func ParseLogQuery(v url.Values) (store.LogQuery, error) {
	var q store.LogQuery
	direction, err := OneOf(v, "direction", "forward", "backward")
	if err != nil {
		return q, err
	}
	q.Backward = direction == "backward"
	if q.Limit, err = Limit(v, defaultLogLimit, maxLogLimit); err != nil {
		return q, err
	}
	if c := v.Get("cursor"); c != "" {
		if ms, err := strconv.ParseInt(c, 10, 64); err == nil {
			q.Cursor = time.UnixMilli(ms).UTC()
		} else if pos, err := decodeLogCursor(c); err == nil {
			q.After = &pos
		} else {
			return q, BadRequest("cursor %q: neither unix milliseconds nor a nextCursor", c)
		}
	}
	if l := v.Get("level"); l != "" {
		if _, ok := store.LogLevelRank(strings.ToLower(l)); !ok {
			return q, BadRequest("level %q: want one of %s", l, strings.Join(store.LogLevels, ", "))
		}
		q.MinLevel = strings.ToLower(l)
	}
	q.Search = v.Get("search")
	for k, vals := range v {
		if key, ok := strings.CutPrefix(k, "fields."); ok && key != "" && len(vals) > 0 {
			if q.Fields == nil {
				q.Fields = map[string]string{}
			}
			q.Fields[key] = vals[0]
		}
	}
	q.RequestID = v.Get("request_id")
	switch s := v.Get("source"); s {
	case "", store.SourceEnvd, store.SourceProcess:
		q.Source = s
	default:
		return q, BadRequest("source %q: want envd or process", s)
	}
	switch s := v.Get("stream"); s {
	case "", "stdout", "stderr", "pty":
		q.Stream = s
	default:
		return q, BadRequest("stream %q: want stdout, stderr or pty", s)
	}
	if p := v.Get("pid"); p != "" {
		if q.PID, err = strconv.Atoi(p); err != nil || q.PID < 1 {
			return q, BadRequest("pid %q: want a positive integer", p)
		}
	}
	return q, nil
}

// EncodeLogCursor is the nextCursor of a line's position, as the log listing gives it:
// base64url("<unix µs>:<seq>"). It never parses as an integer, so it cannot be mistaken
// for E2B's millisecond cursor.
func EncodeLogCursor(p store.LogPosition) string {
	return EncodeCursor(p.Time, strconv.FormatInt(p.Seq, 10))
}

func decodeLogCursor(s string) (store.LogPosition, error) {
	t, seq, err := DecodeCursor(s)
	if err != nil {
		return store.LogPosition{}, err
	}
	n, err := strconv.ParseInt(seq, 10, 64)
	if err != nil {
		return store.LogPosition{}, errors.New("malformed")
	}
	return store.LogPosition{Time: t, Seq: n}, nil
}

// legacyLog is E2B's SandboxLog.
type legacyLog struct {
	Timestamp time.Time `json:"timestamp"`
	Line      string    `json:"line"`
}

type legacyResponse struct {
	Logs       []legacyLog `json:"logs"`
	LogEntries []wireLog   `json:"logEntries"`
}

func (a *logAPI) logsLegacy(w http.ResponseWriter, r *http.Request, teamID string) error {
	v := r.URL.Query()
	q := store.LogQuery{TeamID: teamID, SandboxID: r.PathValue("id")}
	var err error
	if q.Limit, err = Limit(v, defaultLogLimit, maxLogLimit); err != nil {
		return err
	}
	if s := v.Get("start"); s != "" {
		ms, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return BadRequest("start %q: want unix milliseconds", s)
		}
		q.Cursor = time.UnixMilli(ms).UTC()
	}
	labels, err := a.labels(r.Context(), teamID, q.SandboxID)
	if err != nil {
		return err
	}
	page, err := a.cfg.Logs.QueryLogs(r.Context(), q)
	if err != nil {
		return err
	}
	out := legacyResponse{Logs: make([]legacyLog, 0, len(page.Lines)), LogEntries: make([]wireLog, 0, len(page.Lines))}
	for i := range page.Lines {
		l := &page.Lines[i]
		out.Logs = append(out.Logs, legacyLog{Timestamp: l.Time, Line: l.Message})
		out.LogEntries = append(out.LogEntries, toWireLog(l, labels))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// wireCommand is a command record on the wire: the SDK's type.
type wireCommand = cove.CommandRecord

func toWireCommand(c *store.CommandRecord) wireCommand {
	w := wireCommand{SandboxID: c.SandboxID, PID: c.PID, Tag: c.Tag, RequestID: c.RequestID, User: c.User,
		Command: c.Command, Args: c.Args, Cwd: c.Cwd, StartedAt: c.StartedAt, ExitCode: c.ExitCode,
		Signal: c.Signal, EndCause: c.EndCause, SignalRequestID: c.SignalRequestID, KillReason: c.KillReason,
		StdoutBytes: c.StdoutBytes, StderrBytes: c.StderrBytes, StdoutHead: c.StdoutHead,
		StdoutTail: c.StdoutTail, StderrHead: c.StderrHead, StderrTail: c.StderrTail,
		Truncated: c.Truncated, Redactions: c.Redactions}
	if w.Args == nil {
		w.Args = []string{}
	}
	if w.Redactions == nil {
		w.Redactions = map[string]int{}
	}
	if !c.EndedAt.IsZero() {
		end := c.EndedAt
		ms := float64(c.Duration.Microseconds()) / 1000
		w.EndedAt, w.DurationMS = &end, &ms
	}
	return w
}

type commandsResponse = cove.CommandPage

func (a *logAPI) listCommands(w http.ResponseWriter, r *http.Request, teamID string) error {
	v := r.URL.Query()
	limit, err := Limit(v, defaultCommandLimit, maxLogLimit)
	if err != nil {
		return err
	}
	page, err := a.cfg.Commands.ListCommands(r.Context(), r.PathValue("id"), limit, v.Get("cursor"))
	if err != nil {
		return err
	}
	out := commandsResponse{Commands: make([]wireCommand, 0, len(page.Commands))}
	for _, c := range page.Commands {
		if c.TeamID == teamID {
			out.Commands = append(out.Commands, toWireCommand(c))
		}
	}
	if page.Next != "" {
		out.NextCursor = &page.Next
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (a *logAPI) getCommand(w http.ResponseWriter, r *http.Request, teamID string) error {
	id, p := r.PathValue("id"), r.PathValue("pid")
	pid, err := strconv.Atoi(p)
	if err != nil || pid < 1 {
		return BadRequest("pid %q: want a positive integer", p)
	}
	c, err := a.cfg.Commands.GetCommand(r.Context(), id, pid, time.Time{})
	if err != nil {
		return err
	}
	if c.TeamID != teamID {
		return fmt.Errorf("command %d of sandbox %s: %w", pid, id, store.ErrNotFound)
	}
	writeJSON(w, http.StatusOK, toWireCommand(c))
	return nil
}
