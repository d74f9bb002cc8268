// Package collect is the host's half of log collection: it reads what a sandbox's envd
// writes on its two pipes (stdout: output lines and command records; stderr: envd's own JSON
// log lines), labels every line with what the host knows for sure (sandbox, team, template
// and the user's metadata), redacts it, and hands it to the log and command stores.
//
// The one idea: nothing inside the sandbox labels itself. envd says which pid and stream a
// line came from; the host says which sandbox, team and task it belongs to, and host labels
// win over any field a line carries.
//
// It must not import the orchestrator, the runtime or the edges: the orchestrator hands it the
// pipes.
package collect

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/cove-dev/cove/internal/observe/redact"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/sdk/envdapi"
	"github.com/cove-dev/cove/sdk/reason"
)

// Labels are the host's facts about a sandbox, put on every line. Its metadata is joined
// onto lines at query time from the sandbox's record, not copied here.
type Labels struct {
	SandboxID, TeamID, TemplateID string
}

// Logs takes log lines without blocking (logs.Ingester).
type Logs interface {
	Add(store.LogLine)
}

// DropCounter is a Logs that also counts the lines envd dropped inside the sandbox
// (logs.Ingester): the collector hands it each command record's drop counts.
type DropCounter interface {
	DroppedInSandbox(sandboxID, teamID string, lines, bytes uint64)
}

// Collector collects one sandbox's lines and command records.
type Collector struct {
	labels   atomic.Pointer[Labels] // set anew once, when a pooled sandbox is claimed
	redactor *redact.Redactor
	logs     Logs
	commands store.CommandStore
	logger   *slog.Logger

	mu      sync.Mutex
	running map[int]*store.CommandRecord // started, not yet ended, by pid
	recent  []string                     // the last output lines, redacted, for post-mortems
	added   int                          // secrets the sandbox's commands added to redactor

	// OnOOM, when set (before the pipes are read), hears of each kill by envd's OOM killer
	// (a runtime whose kernel has none for the sandbox: gVisor's).
	OnOOM func(ctx context.Context, k envdapi.OOMKill)
}

// recentLines is how many output lines a collector keeps for a post-mortem.
const recentLines = 20

// Redact masks the sandbox's secrets in s.
func (c *Collector) Redact(s string) string {
	out, _ := c.redactor.String(s)
	return out
}

// AddSecret masks v too, in everything collected from now on (a secret the sandbox's network
// rules gained after its create).
func (c *Collector) AddSecret(v string) { c.redactor.AddSecret(v) }

// Recent returns the sandbox's last output lines, oldest first, redacted.
func (c *Collector) Recent() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.recent...)
}

// New returns a collector for one sandbox. logs or commands may be nil to skip them.
func New(labels Labels, r *redact.Redactor, logs Logs, commands store.CommandStore, logger *slog.Logger) *Collector {
	c := &Collector{redactor: r, logs: logs, commands: commands, logger: logger, running: map[int]*store.CommandRecord{}}
	c.labels.Store(&labels)
	return c
}

// Claim labels what is collected from now on as team's: a sandbox booted for a warm pool
// belongs to no team until a create claims it.
func (c *Collector) Claim(team string) {
	l := *c.labels.Load()
	l.TeamID = team
	c.labels.Store(&l)
}

// maxLine bounds one line read from a pipe; envd splits output lines well below it.
const maxLine = 1 << 20

func scanner(r io.Reader) *bufio.Scanner {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	return sc
}

// Stdout reads envd's records (output lines, command_start, command_end) until EOF; command
// records are stored under ctx.
func (c *Collector) Stdout(ctx context.Context, r io.Reader) {
	sc := scanner(r)
	for sc.Scan() {
		c.record(ctx, sc.Bytes())
	}
}

// Stderr reads envd's own log lines until EOF, copying each raw line to raw when set (the
// sandbox's log file, kept for post-mortems).
func (c *Collector) Stderr(r io.Reader, raw io.Writer) {
	sc := scanner(r)
	for sc.Scan() {
		b := sc.Bytes()
		if raw != nil {
			_, _ = raw.Write(append(append([]byte(nil), b...), '\n'))
		}
		c.envdLine(b)
	}
}

func (c *Collector) record(ctx context.Context, b []byte) {
	rec, err := envdapi.Decode(b)
	if err != nil {
		// Not envd's record: keep it as a line of the sandbox's own, labelled and redacted.
		c.add(store.LogLine{Time: time.Now(), Level: "info", Source: store.SourceEnvd, Message: string(b)})
		return
	}
	switch rec.Kind {
	case envdapi.KindOutput:
		c.outputLine(*rec.Output)
	case envdapi.KindCommandStart:
		c.commandStart(ctx, *rec.Start)
	case envdapi.KindCommandEnd:
		c.commandEnd(ctx, *rec.End)
	case envdapi.KindOOMKill:
		if c.OnOOM != nil {
			c.OnOOM(ctx, *rec.OOM)
		}
	}
}

// outputLine stores one line a command wrote; a JSON object line is parsed into fields.
func (c *Collector) outputLine(rec envdapi.OutputLine) {
	line := store.LogLine{Time: rec.Time, Level: "info", Source: store.SourceProcess, Stream: rec.Stream,
		PID: rec.PID, RequestID: rec.RequestID, Message: rec.Line}
	if strings.HasPrefix(strings.TrimSpace(rec.Line), "{") {
		var fields map[string]any
		if json.Unmarshal([]byte(rec.Line), &fields) == nil {
			line.Fields = fields
			if lvl, ok := level(fields[slog.LevelKey]); ok {
				line.Level = lvl
			}
		}
	}
	if rec.Tag != "" {
		line.Fields = with(line.Fields, "process.tag", rec.Tag)
	}
	c.add(line)
}

// envdLine stores one of envd's own JSON log lines.
func (c *Collector) envdLine(b []byte) {
	line := store.LogLine{Time: time.Now(), Level: "info", Source: store.SourceEnvd, Message: string(b)}
	var fields map[string]any
	if json.Unmarshal(b, &fields) == nil {
		if t, ok := fields[slog.TimeKey].(string); ok {
			if ts, err := time.Parse(time.RFC3339Nano, t); err == nil {
				line.Time = ts
			}
		}
		if lvl, ok := level(fields[slog.LevelKey]); ok {
			line.Level = lvl
		}
		if msg, ok := fields[slog.MessageKey].(string); ok {
			line.Message = msg
		}
		if id, ok := fields[telemetry.KeyRequestID].(string); ok {
			line.RequestID = id
		}
		if pid, ok := fields[telemetry.KeyPID].(float64); ok {
			line.PID = int(pid)
		}
		for _, k := range []string{slog.TimeKey, slog.LevelKey, slog.MessageKey, telemetry.KeyRequestID} {
			delete(fields, k)
		}
		line.Fields = fields
	}
	c.add(line)
}

// level reads a line's level field (reason.NormalizeLogLevel, the one reading).
func level(v any) (string, bool) {
	s, ok := v.(string)
	if !ok {
		return "", false
	}
	l, ok := reason.NormalizeLogLevel(s)
	if !ok {
		return "", false
	}
	return l.String(), true
}

func with(fields map[string]any, k string, v any) map[string]any {
	if fields == nil {
		fields = map[string]any{}
	}
	fields[k] = v
	return fields
}

// add labels, redacts and stores one line. Host labels win over the line's own fields.
func (c *Collector) add(line store.LogLine) {
	l := c.labels.Load()
	line.SandboxID, line.TeamID, line.TemplateID = l.SandboxID, l.TeamID, l.TemplateID
	line.Message, _ = c.redactor.String(line.Message)
	if line.Source == store.SourceProcess {
		c.mu.Lock()
		c.recent = append(c.recent, fmt.Sprintf("[%d %s] %s", line.PID, line.Stream, line.Message))
		if len(c.recent) > recentLines {
			c.recent = c.recent[len(c.recent)-recentLines:]
		}
		c.mu.Unlock()
	}
	for k, v := range line.Fields {
		line.Fields[k], _ = c.redactor.Value(k, v)
	}
	// The sandbox's metadata is not copied onto the line: it is stored once with the
	// sandbox and joined at query time (logs API), where it wins over the line's fields.
	if c.logs != nil {
		c.logs.Add(line)
	}
}

func (c *Collector) base(pid int, tag, requestID string, startedAt time.Time) *store.CommandRecord {
	l := c.labels.Load()
	return &store.CommandRecord{SandboxID: l.SandboxID, TeamID: l.TeamID, TemplateID: l.TemplateID,
		PID: pid, Tag: tag, RequestID: requestID, StartedAt: startedAt}
}

// Bounds on the secrets commands add to a sandbox's redactor: envd is inside the sandbox,
// so what it sends must not grow the host's work without end.
const (
	maxCommandSecrets = 256     // per sandbox
	maxSecretLen      = 4 << 10 // bytes; longer values are masked piece by piece
)

// addSecrets makes the sandbox's redactor mask values from now on, within the bounds.
func (c *Collector) addSecrets(values []string) {
	if c.redactor == nil {
		return
	}
	for _, v := range values {
		for len(v) > 0 {
			piece := v[:min(len(v), maxSecretLen)]
			v = v[len(piece):]
			c.mu.Lock()
			full := c.added >= maxCommandSecrets
			c.added++
			c.mu.Unlock()
			if full {
				return
			}
			c.redactor.AddSecret(piece)
		}
	}
}

func (c *Collector) commandStart(ctx context.Context, rec envdapi.CommandStart) {
	c.addSecrets(rec.Secrets)
	cr := c.base(rec.PID, rec.Tag, rec.RequestID, rec.StartedAt)
	cr.User, cr.Cwd = rec.User, rec.Cwd
	cr.Command, _ = c.redactor.String(rec.Command)
	for _, a := range rec.Args {
		s, _ := c.redactor.String(a)
		cr.Args = append(cr.Args, s)
	}
	c.mu.Lock()
	c.running[rec.PID] = cr
	c.mu.Unlock()
	c.upsert(ctx, cr)
}

func (c *Collector) commandEnd(ctx context.Context, rec envdapi.CommandEnd) {
	cr := c.base(rec.PID, rec.Tag, rec.RequestID, rec.StartedAt)
	cr.EndedAt, cr.Duration = rec.EndedAt, time.Duration(rec.DurationMS)*time.Millisecond
	if rec.ExitCode != nil {
		code := int(*rec.ExitCode)
		cr.ExitCode = &code
	}
	cr.Signal, cr.EndCause, cr.SignalRequestID = rec.Signal, rec.EndCause, rec.SignalRequestID
	cr.StdoutBytes, cr.StderrBytes = rec.StdoutBytes, rec.StderrBytes
	counts := redact.Counts{}
	keep := func(head, tail string, total int64, binary bool) (string, string, bool) {
		if binary {
			// Redacted like text, on the decoded bytes: base64 would hide a secret from
			// every pattern while handing it to anyone who decodes the record.
			hb, tb := decodeBinary(head), decodeBinary(tail)
			cut := total > int64(len(hb)) && total > int64(rec.HeadBytes+rec.TailBytes)
			hb, hc := c.redactor.Bytes(hb)
			tb, tc := c.redactor.Bytes(tb)
			counts.Add(hc)
			counts.Add(tc)
			return binaryCut(hb, rec.HeadBytes, false), binaryCut(tb, rec.TailBytes, true), cut
		}
		cut := total > int64(len(head)) && total > int64(rec.HeadBytes+rec.TailBytes)
		h, hc := c.redactor.String(head)
		t, tc := c.redactor.String(tail)
		counts.Add(hc)
		counts.Add(tc)
		h, t = cutHead(h, rec.HeadBytes), cutTail(t, rec.TailBytes)
		return h, t, cut
	}
	var outCut, errCut bool
	cr.StdoutHead, cr.StdoutTail, outCut = keep(rec.StdoutHead, rec.StdoutTail, rec.StdoutBytes, rec.StdoutBinary)
	cr.StderrHead, cr.StderrTail, errCut = keep(rec.StderrHead, rec.StderrTail, rec.StderrBytes, rec.StderrBinary)
	cr.Truncated = outCut || errCut || rec.LinesDropped > 0 || rec.BytesDropped > 0
	if dc, ok := c.logs.(DropCounter); ok {
		l := c.labels.Load()
		dc.DroppedInSandbox(l.SandboxID, l.TeamID, rec.LinesDropped, rec.BytesDropped)
	}
	if n := counts.Total(); n > 0 {
		cr.Redactions = map[string]int{}
		for _, k := range redact.Kinds() {
			if v := counts.Of(k); v > 0 {
				cr.Redactions[k.String()] = v
			}
		}
	}
	c.mu.Lock()
	delete(c.running, rec.PID)
	c.mu.Unlock()
	c.upsert(ctx, cr)
}

// SandboxPaused ends the records of commands still running when the sandbox was paused
// without its memory (every process stopped), storing them under ctx.
func (c *Collector) SandboxPaused(ctx context.Context, at time.Time) {
	c.mu.Lock()
	running := c.running
	c.running = map[int]*store.CommandRecord{}
	c.mu.Unlock()
	for _, cr := range running {
		cr.EndedAt, cr.Duration, cr.EndCause = at, at.Sub(cr.StartedAt), reason.EndSandboxPaused
		c.upsert(ctx, cr)
	}
}

// SandboxKilled ends the records of commands still running when the sandbox died, storing
// them under ctx.
func (c *Collector) SandboxKilled(ctx context.Context, why reason.KillReason, at time.Time) {
	c.mu.Lock()
	running := c.running
	c.running = map[int]*store.CommandRecord{}
	c.mu.Unlock()
	for _, cr := range running {
		cr.EndedAt, cr.Duration, cr.EndCause, cr.KillReason = at, at.Sub(cr.StartedAt), reason.EndSandboxKilled, why
		c.upsert(ctx, cr)
	}
}

func (c *Collector) upsert(ctx context.Context, cr *store.CommandRecord) {
	if c.commands == nil {
		return
	}
	if err := c.commands.UpsertCommand(ctx, cr); err != nil {
		telemetry.Warnings.Warn(ctx, c.logger, "", "command record not stored", telemetry.KeyPID, cr.PID, telemetry.KeyError, err.Error())
	}
}

// BinaryPrefix starts the head and tail of a command record whose output was binary: the
// rest is base64 of the bytes.
const BinaryPrefix = "base64:"

// decodeBinary decodes the base64 head or tail of binary output; nil when it is not base64.
func decodeBinary(b64 string) []byte {
	b, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil
	}
	return b
}

// binaryCut keeps at most n bytes of binary output from its start, or its end when fromEnd,
// as BinaryPrefix+base64; "" for none.
func binaryCut(b []byte, n int, fromEnd bool) string {
	if len(b) == 0 {
		return ""
	}
	if n > 0 && len(b) > n {
		if fromEnd {
			b = b[len(b)-n:]
		} else {
			b = b[:n]
		}
	}
	return BinaryPrefix + base64.StdEncoding.EncodeToString(b)
}

// cutHead keeps at most n bytes of s from its start, on a UTF-8 boundary.
func cutHead(s string, n int) string {
	if n <= 0 || len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// cutTail keeps at most n bytes of s from its end, on a UTF-8 boundary.
func cutTail(s string, n int) string {
	if n <= 0 || len(s) <= n {
		return s
	}
	i := len(s) - n
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return s[i:]
}
