// Package envdapi is the contract between envd and the host's collector: the JSON records
// envd writes, one a line, on the stdout pipe the runtime owns (output lines and a record per
// command), defined once and imported by both sides.
package envdapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/cove-dev/cove/sdk/reason"
)

// Kind is what a record is.
type Kind string

// The kinds of record.
const (
	KindOutput       Kind = "output"
	KindCommandStart Kind = "command_start"
	KindCommandEnd   Kind = "command_end"
	// KindOOMKill: envd, the sandbox's OOM killer where the kernel under it has none for the
	// sandbox (gVisor's), killed a process past the memory limit.
	KindOOMKill Kind = "oom_kill"
)

func (k Kind) String() string { return string(k) }

// ParseKind returns the kind named s, or an error for any other name.
func ParseKind(s string) (Kind, error) {
	switch k := Kind(s); k {
	case KindOutput, KindCommandStart, KindCommandEnd, KindOOMKill:
		return k, nil
	}
	return "", fmt.Errorf("envdapi: unknown record kind %q", s)
}

// EndCause is why a command ended: the one vocabulary of reason, from envd's record to the
// SDK's.
type EndCause = reason.EndCause

// ParseEndCause returns the cause named s among those envd reports (reason's, but for
// EndSandboxKilled, which only the host can know), or an error for any other name.
func ParseEndCause(s string) (EndCause, error) {
	switch c := EndCause(s); c {
	case reason.EndExited, reason.EndKilled, reason.EndTimeout, reason.EndOOMKilled:
		return c, nil
	}
	return "", fmt.Errorf("envdapi: unknown end cause %q", s)
}

// OutputLine is one line a command wrote (kind "output"). envd writes it without reflection
// (AppendOutputLine) because it runs for every line.
type OutputLine struct {
	Kind      Kind      `json:"kind"`
	Time      time.Time `json:"ts"`
	PID       int       `json:"pid"`
	Stream    string    `json:"stream"`
	RequestID string    `json:"request_id,omitempty"`
	Tag       string    `json:"tag,omitempty"`
	Line      string    `json:"line"`
	Partial   bool      `json:"partial,omitempty"` // split at the line cap or cut at the process's end
	Binary    bool      `json:"binary,omitempty"`  // a summary of binary output, not the output itself
}

// CommandStart is the record written when a process starts.
type CommandStart struct {
	Kind      Kind      `json:"kind"`
	PID       int       `json:"pid"`
	Tag       string    `json:"tag,omitempty"`
	RequestID string    `json:"request_id,omitempty"`
	User      string    `json:"user"`
	Command   string    `json:"command"`
	Args      []string  `json:"args"`
	Cwd       string    `json:"cwd"`
	StartedAt time.Time `json:"started_at"`
	// Secrets are the values of the command's own envs whose names look secret: the host
	// masks them in everything it collects from the sandbox from here on, as it masks the
	// sandbox's env secrets.
	Secrets []string `json:"secrets,omitempty"`
}

// CommandEnd is the record written when a process ends. Heads and tails of a stream whose
// output was binary are base64 (StdoutBinary, StderrBinary).
type CommandEnd struct {
	Kind            Kind      `json:"kind"`
	PID             int       `json:"pid"`
	Tag             string    `json:"tag,omitempty"`
	RequestID       string    `json:"request_id,omitempty"`
	StartedAt       time.Time `json:"started_at"`
	EndedAt         time.Time `json:"ended_at"`
	DurationMS      int64     `json:"duration_ms"`
	ExitCode        *int32    `json:"exit_code,omitempty"`
	Signal          string    `json:"signal,omitempty"`
	EndCause        EndCause  `json:"end_cause"`
	SignalRequestID string    `json:"signal_request_id,omitempty"`
	StdoutBytes     int64     `json:"stdout_bytes"`
	StderrBytes     int64     `json:"stderr_bytes"`
	StdoutHead      string    `json:"stdout_head,omitempty"`
	StdoutTail      string    `json:"stdout_tail,omitempty"`
	StderrHead      string    `json:"stderr_head,omitempty"`
	StderrTail      string    `json:"stderr_tail,omitempty"`
	StdoutBinary    bool      `json:"stdout_binary,omitempty"`
	StderrBinary    bool      `json:"stderr_binary,omitempty"`
	HeadBytes       int       `json:"head_bytes"` // the caps the host cuts to, after redacting
	TailBytes       int       `json:"tail_bytes"`
	LinesDropped    uint64    `json:"lines_dropped,omitempty"`
	BytesDropped    uint64    `json:"bytes_dropped,omitempty"` // output not sent as lines: over a budget or binary
}

// OOMKill is envd's record of a kill by its OOM killer (KindOOMKill): the host learns of it
// only so, as the kernel's OOM kills are learnt from the sandbox's cgroup under runc.
type OOMKill struct {
	Kind Kind      `json:"kind"`
	Time time.Time `json:"time"`
	PID  int       `json:"pid"`
	// Comm is the process's name (/proc/<pid>/comm).
	Comm string `json:"comm"`
	// RSSBytes is what the process held; UsedBytes and LimitBytes the sandbox's memory then.
	RSSBytes   uint64 `json:"rss_bytes"`
	UsedBytes  uint64 `json:"used_bytes"`
	LimitBytes uint64 `json:"limit_bytes"`
	// Kills is the sandbox's OOM kill count, this one included.
	Kills uint64 `json:"kills"`
}

// Record is one decoded line: exactly one of its fields is set, the one its Kind names.
type Record struct {
	Kind   Kind
	Output *OutputLine
	Start  *CommandStart
	End    *CommandEnd
	OOM    *OOMKill
}

// outputPrefix is how AppendOutputLine starts every output line: the common case is
// recognised without decoding twice.
const outputPrefix = `{"kind":"output",`

// Decode decodes one record line; an error for a line that is not JSON or names no known kind.
func Decode(b []byte) (Record, error) {
	var kind Kind
	if bytes.HasPrefix(b, []byte(outputPrefix)) {
		kind = KindOutput
	} else {
		var head struct {
			Kind string `json:"kind"`
		}
		if err := json.Unmarshal(b, &head); err != nil {
			return Record{}, fmt.Errorf("envdapi: %w", err)
		}
		k, err := ParseKind(head.Kind)
		if err != nil {
			return Record{}, err
		}
		kind = k
	}
	r := Record{Kind: kind}
	var err error
	switch kind {
	case KindOutput:
		r.Output = &OutputLine{}
		err = json.Unmarshal(b, r.Output)
	case KindCommandStart:
		r.Start = &CommandStart{}
		err = json.Unmarshal(b, r.Start)
	case KindCommandEnd:
		r.End = &CommandEnd{}
		err = json.Unmarshal(b, r.End)
	case KindOOMKill:
		r.OOM = &OOMKill{}
		err = json.Unmarshal(b, r.OOM)
	}
	if err != nil {
		return Record{}, fmt.Errorf("envdapi: %s record: %w", kind, err)
	}
	return r, nil
}
