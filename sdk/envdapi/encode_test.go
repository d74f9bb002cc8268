package envdapi

import (
	"encoding/json"
	"testing"
	"time"
)

// FuzzOutputLineIsTheJSONOfOutputLine checks the hand-written encoder against encoding/json.
func FuzzOutputLineIsTheJSONOfOutputLine(f *testing.F) {
	for _, s := range []string{"plain", `quote " and \ backslash`, "tab\tnew\nline\r", "\x00\x1f\x7f", "é ünïcode 🚀", "bad \xff utf8", "<html>&"} {
		f.Add(s, "req-1", "tag", false)
	}
	ts := time.Date(2026, 12, 2, 16, 0, 0, 123456789, time.UTC)
	f.Fuzz(func(t *testing.T, line, requestID, tag string, partial bool) {
		got := AppendOutputLine(nil, ts, 42, "stdout", requestID, tag, []byte(line), partial)
		var a, b map[string]any
		if err := json.Unmarshal(got, &a); err != nil {
			t.Fatalf("not JSON: %q: %v", got, err)
		}
		want, _ := json.Marshal(OutputLine{Kind: KindOutput, Time: ts, PID: 42, Stream: "stdout", RequestID: requestID, Tag: tag, Line: line, Partial: partial})
		_ = json.Unmarshal(want, &b)
		ga, _ := json.Marshal(a)
		gb, _ := json.Marshal(b)
		if string(ga) != string(gb) {
			t.Fatalf("line %q:\n got %s\nwant %s", line, ga, gb)
		}
	})
}

func BenchmarkOutputLine(b *testing.B) {
	line := []byte(`2026-12-02 16:00:00 INFO worker 3 processed item 18233 in 12 ms {"ok":true}`)
	ts := time.Now()
	b.Run("hand-written", func(b *testing.B) {
		for b.Loop() {
			AppendOutputLine(make([]byte, 0, 256), ts, 42, "stdout", "01m8vrm5q912nbfaqh1h", "", line, false)
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		for b.Loop() {
			_, _ = json.Marshal(OutputLine{Kind: KindOutput, Time: ts, PID: 42, Stream: "stdout", RequestID: "01m8vrm5q912nbfaqh1h", Line: string(line)})
		}
	})
}
