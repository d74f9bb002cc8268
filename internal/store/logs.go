package store

import (
	"context"
	"strings"
	"time"

	"github.com/cove-dev/cove/internal/errdefs"
	"github.com/cove-dev/cove/sdk/reason"
)

// ErrBadCursor is returned for a listing cursor that no listing made.
var ErrBadCursor = errdefs.New(errdefs.ErrInvalidArgument, "bad cursor")

// Log levels, lowest first. A query's MinLevel keeps its level and those after it.
var LogLevels = []string{"debug", "info", "warn", "error"}

// LogLevelRank returns level's place in LogLevels; ok is false for anything else.
func LogLevelRank(level string) (rank int, ok bool) {
	for i, l := range LogLevels {
		if l == level {
			return i, true
		}
	}
	return 0, false
}

// Log line sources.
const (
	SourceEnvd    = "envd"    // envd's own log lines
	SourceProcess = "process" // a command's output
	SourceServer  = "server"  // cove server's own lines about a sandbox (API, proxy, orchestrator)
	SourceBuild   = "build"   // a template build's lines, under the build id in place of a sandbox id
)

// LogLine is one line a sandbox logged: one of envd's own lines, or one line of a command's
// output. The host labels it; nothing inside the sandbox labels itself.
type LogLine struct {
	Time       time.Time
	SandboxID  string
	TeamID     string
	TemplateID string
	Level      string // debug, info, warn or error; process output is info on both streams
	Source     string // SourceEnvd or SourceProcess
	Stream     string // "stdout", "stderr" or "pty" for process lines; "" for envd's
	PID        int    // 0 when not about a process
	RequestID  string
	Message    string
	// Fields are the line's own JSON fields, when it was a JSON object, and the sandbox's
	// metadata, as the caller gave them.
	Fields map[string]any
}

// LogPosition is an exact place in one sandbox's log: the (Time, Seq) of a line. Seq orders
// lines of the same time in the order they were stored.
type LogPosition struct {
	Time time.Time
	Seq  int64
}

// LogQuery selects lines of one sandbox's log.
type LogQuery struct {
	TeamID string // required: a query never crosses teams
	// SandboxID is the sandbox whose log to read; "" searches every sandbox of the team.
	SandboxID string
	// SandboxIn, when not nil, keeps lines of these sandboxes only (empty: none), as a
	// search by the sandboxes' metadata resolves to: labels are not copied onto lines.
	SandboxIn []string
	// TemplateID keeps lines of sandboxes of this template id, when not "".
	TemplateID string
	// Since and Until bound the lines' times: Since <= Time < Until; a zero bound is none.
	Since, Until time.Time
	// Cursor is E2B's cursor, a time at millisecond precision: forward, lines at or after
	// it; backward, lines at or before its millisecond. Zero for no bound.
	Cursor time.Time
	// After continues a listing strictly after this position, in the listing's order; it
	// pages without repeats where a millisecond cursor cannot.
	After    *LogPosition
	Limit    int  // 1..1000; 1000 when 0
	Backward bool // newest first
	MinLevel string
	// Search keeps lines whose message contains every whitespace-separated term of it, or
	// the whole of a "double-quoted" phrase, ignoring ASCII case.
	Search    string
	Fields    map[string]string // every field must have this value (as text)
	RequestID string
	Source    string
	Stream    string
	PID       int // 0 for any
}

// LogPage is one page of a log query.
type LogPage struct {
	Lines []LogLine
	// Next is the position of the page's last line when more lines follow it; nil on the
	// last page.
	Next *LogPosition
	// First and Last are the positions of the page's first and last lines, nil when it is
	// empty: a live tail continues After the newest line it has shown.
	First, Last *LogPosition
}

// LogStore stores sandboxes' log lines.
type LogStore interface {
	// InsertLogs stores a batch of lines, all or none.
	InsertLogs(ctx context.Context, lines []LogLine) error
	// QueryLogs returns one page of the lines q selects.
	QueryLogs(ctx context.Context, q LogQuery) (*LogPage, error)
	// PruneLogs deletes lines older than olderThan and returns how many it deleted.
	PruneLogs(ctx context.Context, olderThan time.Time) (int64, error)
}

// CommandRecord is what Cove remembers of one command a sandbox ran: who started it, how it
// ended, and the head and tail of its output, redacted.
type CommandRecord struct {
	SandboxID  string
	TeamID     string
	TemplateID string
	PID        int
	Tag        string
	RequestID  string // the call that started it
	User       string
	Command    string
	Args       []string
	Cwd        string
	StartedAt  time.Time
	EndedAt    time.Time     // zero while it runs
	Duration   time.Duration // EndedAt-StartedAt when zero and EndedAt is set
	ExitCode   *int
	Signal     string
	EndCause   reason.EndCause // "" while it runs
	// SignalRequestID is the request that sent the fatal signal (killed, timeout).
	SignalRequestID string
	// KillReason is the sandbox's kill reason when EndCause is reason.EndSandboxKilled.
	KillReason  reason.KillReason
	StdoutBytes int64
	StderrBytes int64
	StdoutHead  string
	StdoutTail  string
	StderrHead  string
	StderrTail  string
	Truncated   bool
	Redactions  map[string]int // redactions made in the output, by kind
}

// CommandPage is one page of a command listing.
type CommandPage struct {
	Commands []*CommandRecord
	Next     string // the cursor of the next page; "" on the last
}

// CommandStore stores command records. A pid repeats over a sandbox's life, so a record is
// keyed by (sandbox, pid, start time).
type CommandStore interface {
	// UpsertCommand writes c, or merges it into the record with its key: fields c leaves
	// zero keep their stored values. A start record may be written first, then the end.
	UpsertCommand(ctx context.Context, c *CommandRecord) error
	// GetCommand returns the record of pid started at startedAt, or the latest of pid's
	// records when startedAt is zero; ErrNotFound when there is none.
	GetCommand(ctx context.Context, sandboxID string, pid int, startedAt time.Time) (*CommandRecord, error)
	// ListCommands returns the sandbox's records newest first, at most limit (1..1000; 100
	// when 0), after the page cursor names ("" for the first page).
	ListCommands(ctx context.Context, sandboxID string, limit int, cursor string) (*CommandPage, error)
	// PruneCommands deletes records of commands that ended before olderThan.
	PruneCommands(ctx context.Context, olderThan time.Time) (int64, error)
	// CloseOpenCommands ends every record of the sandbox still open (a crash left it so) at
	// at, with EndSandboxKilled and killReason, and returns how many it closed.
	CloseOpenCommands(ctx context.Context, sandboxID string, at time.Time, killReason string) (int64, error)
}

// SearchTerms splits a LogQuery's Search into the substrings a line must all contain: its
// whitespace-separated words, and each "double-quoted" phrase whole.
func SearchTerms(s string) []string {
	var terms []string
	for {
		s = strings.TrimSpace(s)
		if s == "" {
			return terms
		}
		if s[0] == '"' {
			if end := strings.IndexByte(s[1:], '"'); end >= 0 {
				if phrase := s[1 : 1+end]; phrase != "" {
					terms = append(terms, phrase)
				}
				s = s[2+end:]
				continue
			}
			s = s[1:] // an unmatched quote is not part of the search
			continue
		}
		word, rest, _ := strings.Cut(s, " ")
		if i := strings.IndexAny(word, "\t\n\r"); i >= 0 {
			word, rest = word[:i], word[i:]+" "+rest
		}
		terms = append(terms, word)
		s = rest
	}
}
