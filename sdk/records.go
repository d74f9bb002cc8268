package cove

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/cove-dev/cove/sdk/reason"
)

// CommandRecord is what Cove recorded of one command a sandbox ran, as GET
// /sandboxes/{id}/commands[/{pid}] answers: the server emits this very type.
type CommandRecord struct {
	SandboxID       string            `json:"sandboxId"`
	PID             int               `json:"pid"`
	Tag             string            `json:"tag"`
	RequestID       string            `json:"requestId"` // the call that started it
	User            string            `json:"user"`
	Command         string            `json:"command"`
	Args            []string          `json:"args"`
	Cwd             string            `json:"cwd"`
	StartedAt       time.Time         `json:"startedAt"`
	EndedAt         *time.Time        `json:"endedAt"`    // null while it runs
	DurationMS      *float64          `json:"durationMs"` // null while it runs
	ExitCode        *int              `json:"exitCode"`
	Signal          string            `json:"signal"`
	EndCause        reason.EndCause   `json:"endCause"` // "" while it runs
	SignalRequestID string            `json:"signalRequestId"`
	KillReason      reason.KillReason `json:"killReason"` // the sandbox's, when EndCause is sandbox_killed
	StdoutBytes     int64             `json:"stdoutBytes"`
	StderrBytes     int64             `json:"stderrBytes"`
	// The head and tail of each stream the record keeps (the server's record caps).
	StdoutHead string         `json:"stdoutHead"`
	StdoutTail string         `json:"stdoutTail"`
	StderrHead string         `json:"stderrHead"`
	StderrTail string         `json:"stderrTail"`
	Truncated  bool           `json:"truncated"`
	Redactions map[string]int `json:"redactions"` // secrets masked in the output, by kind
}

// CommandPage is one page of a sandbox's command records, newest first.
type CommandPage struct {
	Commands   []CommandRecord `json:"commands"`
	NextCursor *string         `json:"nextCursor"` // null on the last page
}

// Commands lists the sandbox's command records, newest first, from cursor ("" for the first
// page). A killed sandbox's records stay readable.
func (c *Client) Commands(ctx context.Context, sandboxID, cursor string) (*CommandPage, error) {
	path := "/sandboxes/" + url.PathEscape(sandboxID) + "/commands"
	if cursor != "" {
		path += "?" + url.Values{"cursor": {cursor}}.Encode()
	}
	var out CommandPage
	if _, err := c.do(ctx, "list commands", sandboxID, http.MethodGet, path, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Command returns the latest record of the sandbox's process pid.
func (c *Client) Command(ctx context.Context, sandboxID string, pid int) (*CommandRecord, error) {
	var out CommandRecord
	path := "/sandboxes/" + url.PathEscape(sandboxID) + "/commands/" + strconv.Itoa(pid)
	if _, err := c.do(ctx, "get command", sandboxID, http.MethodGet, path, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// TraceEntry is one step of a request's timeline.
type TraceEntry struct {
	Time      time.Time      `json:"time"`
	Source    string         `json:"source"` // server, envd, process, event, command
	SandboxID string         `json:"sandboxId,omitempty"`
	Level     string         `json:"level,omitempty"`
	Message   string         `json:"message"`
	Fields    map[string]any `json:"fields,omitempty"`
}

// Trace is everything Cove stored under one request id, oldest first, as GET
// /traces/{requestId} answers: the server emits this very type.
type Trace struct {
	RequestID string       `json:"requestId"`
	Entries   []TraceEntry `json:"entries"`
}

// Trace returns the team's timeline of requestID: the server's, the proxy's and envd's lines,
// the lifecycle events and the command records stored under it.
func (c *Client) Trace(ctx context.Context, requestID string) (*Trace, error) {
	var out Trace
	if _, err := c.do(ctx, "get trace", "", http.MethodGet, "/traces/"+url.PathEscape(requestID), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// LogEntry is one line of a sandbox's logs, E2B's SandboxLogEntry: the server emits this
// very type. Fields are strings, as E2B's are; Cove adds source (envd, process, server),
// stream, process.pid and request_id, and the sandbox's metadata.
type LogEntry struct {
	Timestamp time.Time         `json:"timestamp"`
	Message   string            `json:"message"`
	Level     string            `json:"level"`
	Fields    map[string]string `json:"fields"`
}

// LogPage is one page of GET /v2/sandboxes/{id}/logs.
type LogPage struct {
	Logs []LogEntry `json:"logs"`
	// NextCursor continues the listing without repeats, as the cursor of the next call in
	// the same direction; null on the last page.
	NextCursor *string `json:"nextCursor"`
}

// LogQuery selects a sandbox's log lines.
type LogQuery struct {
	RequestID string            // only lines of this request
	Search    string            // only lines containing every word (or a "quoted phrase")
	Level     string            // minimum level: debug, info, warn or error
	Fields    map[string]string // only lines whose field KEY has VALUE (metadata too)
	Limit     int               // lines per page; the server's default when 0
	Cursor    string            // a previous page's NextCursor
}

// Logs returns one page of the sandbox's log lines. A killed sandbox's logs stay readable.
func (c *Client) Logs(ctx context.Context, sandboxID string, q LogQuery) (*LogPage, error) {
	v := url.Values{}
	for k, s := range map[string]string{"request_id": q.RequestID, "search": q.Search, "level": q.Level, "cursor": q.Cursor} {
		if s != "" {
			v.Set(k, s)
		}
	}
	for k, s := range q.Fields {
		v.Set("fields."+k, s)
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	path := "/v2/sandboxes/" + url.PathEscape(sandboxID) + "/logs"
	if len(v) > 0 {
		path += "?" + v.Encode()
	}
	var out LogPage
	if _, err := c.do(ctx, "get logs", sandboxID, http.MethodGet, path, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
