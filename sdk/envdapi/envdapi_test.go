package envdapi

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/cove-dev/cove/sdk/reason"
)

func TestRecordsRoundTrip(t *testing.T) {
	ts := time.Date(2026, 12, 4, 3, 0, 0, 123456789, time.UTC)
	code := int32(3)
	tests := []struct {
		name string
		line []byte
		want Record
	}{
		{"an output line written by the hand encoder decodes to what envd wrote",
			AppendOutputLine(nil, ts, 42, "stdout", "req-1", "tag", []byte("héllo \"x\"\t\x01"), true),
			Record{Kind: KindOutput, Output: &OutputLine{Kind: KindOutput, Time: ts, PID: 42, Stream: "stdout", RequestID: "req-1", Tag: "tag", Line: "héllo \"x\"\t\x01", Partial: true}}},
		{"a command start decodes to what envd wrote",
			mustJSON(t, CommandStart{Kind: KindCommandStart, PID: 7, Tag: "t", RequestID: "req-2", User: "user", Command: "/bin/sh", Args: []string{"-c", "echo hi"}, Cwd: "/home/user", StartedAt: ts}),
			Record{Kind: KindCommandStart, Start: &CommandStart{Kind: KindCommandStart, PID: 7, Tag: "t", RequestID: "req-2", User: "user", Command: "/bin/sh", Args: []string{"-c", "echo hi"}, Cwd: "/home/user", StartedAt: ts}}},
		{"a command end keeps every field, binary flags and drop counts included",
			mustJSON(t, CommandEnd{Kind: KindCommandEnd, PID: 7, RequestID: "req-2", StartedAt: ts, EndedAt: ts.Add(time.Second), DurationMS: 1000, ExitCode: &code,
				EndCause: reason.EndExited, StdoutBytes: 10, StderrBytes: 2, StdoutHead: "AAEC", StdoutBinary: true, StderrHead: "e\n", HeadBytes: 4096, TailBytes: 4096, LinesDropped: 5, BytesDropped: 99}),
			Record{Kind: KindCommandEnd, End: &CommandEnd{Kind: KindCommandEnd, PID: 7, RequestID: "req-2", StartedAt: ts, EndedAt: ts.Add(time.Second), DurationMS: 1000, ExitCode: &code,
				EndCause: reason.EndExited, StdoutBytes: 10, StderrBytes: 2, StdoutHead: "AAEC", StdoutBinary: true, StderrHead: "e\n", HeadBytes: 4096, TailBytes: 4096, LinesDropped: 5, BytesDropped: 99}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Decode(tt.line)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestDecodeRejectsWhatIsNotARecord(t *testing.T) {
	for _, tt := range []struct{ name, line string }{
		{"a line that is not JSON is an error", "hello"},
		{"an unknown kind is an error", `{"kind":"gossip","pid":1}`},
		{"a record without a kind is an error", `{"pid":1}`},
		{"an output line with a field of the wrong type is an error", `{"kind":"output","pid":"one"}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if r, err := Decode([]byte(tt.line)); err == nil {
				t.Errorf("decoded %+v", r)
			}
		})
	}
}

func TestKindsAndCausesParseOnlyTheirNames(t *testing.T) {
	for _, k := range []Kind{KindOutput, KindCommandStart, KindCommandEnd} {
		if got, err := ParseKind(k.String()); err != nil || got != k {
			t.Errorf("ParseKind(%q) = %q, %v", k, got, err)
		}
	}
	for _, c := range []EndCause{reason.EndExited, reason.EndKilled, reason.EndTimeout, reason.EndOOMKilled} {
		if got, err := ParseEndCause(c.String()); err != nil || got != c {
			t.Errorf("ParseEndCause(%q) = %q, %v", c, got, err)
		}
	}
	if _, err := ParseKind("Output"); err == nil {
		t.Error("ParseKind accepted Output")
	}
	if _, err := ParseEndCause("sandbox_killed"); err == nil {
		t.Error("ParseEndCause accepted sandbox_killed")
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
