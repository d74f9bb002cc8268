package process

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"fmt"
	"hash/crc32"
	"strings"
	"sync"
	"testing"

	"github.com/cove-dev/cove/sdk/envdapi"
)

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }

// feed writes reads to a fresh capture on a sink with budget and returns the lines the sink
// wrote and the capture.
func feed(t *testing.T, budget Budget, commandBytes int64, reads ...[]byte) ([]envdapi.OutputLine, *capture) {
	t.Helper()
	return feedSink(t, budget, func(s *Sink) { s.CommandBytes = commandBytes }, reads...)
}

// feedSink is feed with the sink's fields set by set.
func feedSink(t *testing.T, budget Budget, set func(*Sink), reads ...[]byte) ([]envdapi.OutputLine, *capture) {
	t.Helper()
	out := &syncBuf{}
	s := NewSink(out, budget)
	set(s)
	c := &capture{sink: s, p: &proc{pid: 9, requestID: "req"}, stream: "stdout"}
	for _, r := range reads {
		c.write(r)
	}
	c.flush()
	s.Close()
	var lines []envdapi.OutputLine
	sc := bufio.NewScanner(&out.b)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		rec, err := envdapi.Decode(sc.Bytes())
		if err != nil || rec.Output == nil {
			t.Fatalf("sink wrote %q: %v", sc.Text(), err)
		}
		lines = append(lines, *rec.Output)
	}
	return lines, c
}

// seqReads is `seq n` cut into reads of size bytes, cutting lines anywhere.
func seqReads(n, size int) [][]byte {
	var b []byte
	for i := 1; i <= n; i++ {
		b = fmt.Appendf(b, "%d\n", i)
	}
	var reads [][]byte
	for len(b) > 0 {
		k := min(size, len(b))
		reads = append(reads, b[:k])
		b = b[k:]
	}
	return reads
}

func TestBudgetsDropAndCountEveryLineOnce(t *testing.T) {
	big := Budget{LinesPerSec: 1 << 30, BytesPerSec: 1 << 40}
	tests := []struct {
		name         string
		budget       Budget
		commandBytes int64
		lines, read  int
		wantKeptMax  int
	}{
		{"a command past its byte cap keeps what came first and counts the rest", big, 10000, 20000, 1000, 10000 / 4},
		{"reads that cut lines in the middle still count each line once", big, 5000, 20000, 333, 5000 / 4},
		{"the sandbox's byte burst bounds what one command sends", Budget{LinesPerSec: 1 << 30, BytesPerSec: 1, ByteBurst: 8000}, 0, 20000, 777, 8000 / 4},
		{"the sandbox's line burst bounds the lines, split reads or not", Budget{LinesPerSec: 1, LineBurst: 300, BytesPerSec: 1 << 40}, 0, 5000, 500, 301},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lines, c := feed(t, tt.budget, tt.commandBytes, seqReads(tt.lines, tt.read)...)
			if len(lines) == 0 || len(lines) > tt.wantKeptMax {
				t.Errorf("%d lines kept, want 1..%d", len(lines), tt.wantKeptMax)
			}
			// Each kept line is a whole line of seq, in order: the first ones, then any a later
			// read could fit in what the budget had left.
			prev := 0
			for i, l := range lines {
				var n int
				if _, err := fmt.Sscan(l.Line, &n); err != nil || n <= prev || l.Partial || (i < 10 && n != i+1) {
					t.Fatalf("line %d is %q (partial %v) after %d: not whole, not in order or not the first", i, l.Line, l.Partial, prev)
				}
				prev = n
			}
			if got := uint64(len(lines)) + c.dropped; got != uint64(tt.lines) {
				t.Errorf("%d kept + %d dropped = %d lines, want %d", len(lines), c.dropped, got, tt.lines)
			}
			if c.bytesDropped == 0 {
				t.Error("no bytes counted as dropped")
			}
			if !strings.HasPrefix(string(c.head), "1\n2\n3\n") || !strings.HasSuffix(string(c.tailBytes()), fmt.Sprintf("%d\n", tt.lines)) {
				t.Errorf("head %q… tail …%q: not exact", c.head[:10], c.tail[len(c.tail)-10:])
			}
		})
	}
}

func TestLongLinesAreCutAtLineMaxHoweverTheyAreRead(t *testing.T) {
	b := func(s ...string) [][]byte {
		var out [][]byte
		for _, x := range s {
			out = append(out, []byte(x))
		}
		return out
	}
	for _, tt := range []struct {
		name  string
		reads [][]byte
		want  string // each line, "+" after a piece the next one continues
	}{
		{"a long line in one read is cut into pieces", b("0123456789ABCDEFGHIJ\n"), "01234567+ 89ABCDEF+ GHIJ"},
		{"a long line over several reads is cut at the same places", b("0123", "456789AB", "CDEFGHIJ\n"), "01234567+ 89ABCDEF+ GHIJ"},
		{"a long line and a short one in one read", b("0123456789\nab\n"), "01234567+ 89 ab"},
		{"a line exactly the limit is one line", b("01234567\n"), "01234567"},
		{"a line exactly the limit over reads is one line", b("0123", "4567", "\n"), "01234567"},
		{"a long last line without its newline is cut too", b("0123456789ABCDEFGH"), "01234567+ 89ABCDEF+ GH+"},
		{"short lines pass whole", b("ab\ncd\n", "\n"), "ab cd "},
	} {
		t.Run(tt.name, func(t *testing.T) {
			lines, _ := feedSink(t, Budget{}, func(s *Sink) { s.LineMax = 8 }, tt.reads...)
			var got []string
			for _, l := range lines {
				if l.Partial {
					l.Line += "+"
				}
				got = append(got, l.Line)
			}
			if strings.Join(got, " ") != tt.want {
				t.Errorf("lines %q, want %q", strings.Join(got, " "), tt.want)
			}
		})
	}
}

func TestBinaryOutputIsOneSummaryPerStream(t *testing.T) {
	zeros := make([]byte, 100000)
	text := []byte("text before\n")
	tests := []struct {
		name  string
		reads [][]byte
		want  []string
	}{
		{"NUL bytes read after read give one summary with the size, crc32c and sha256", [][]byte{text, zeros, zeros, zeros},
			[]string{"text before", "binary output, 293.0 KiB, " + sums(bytes.Repeat(zeros, 3))}},
		{"invalid UTF-8 is binary", [][]byte{[]byte("ok\xff\xfe")}, []string{"binary output, 4 B, " + sums([]byte("ok\xff\xfe"))}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lines, c := feed(t, Budget{}, 0, tt.reads...)
			var got []string
			for _, l := range lines {
				got = append(got, l.Line)
				if strings.Contains(l.Line, `\u0000`) {
					t.Errorf("a NUL was escaped: %q", l.Line)
				}
			}
			if strings.Join(got, "|") != strings.Join(tt.want, "|") {
				t.Errorf("lines %q\nwant %q", got, tt.want)
			}
			if last := lines[len(lines)-1]; !last.Binary {
				t.Error("the summary is not marked binary")
			}
			if !c.binary {
				t.Error("the capture did not see binary output")
			}
		})
	}
}

// sums is how a summary names the digests of b.
func sums(b []byte) string {
	return fmt.Sprintf("crc32c %08x, sha256 %x", crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)), sha256.Sum256(b))
}

func TestBinarySummaryGivesUpTheSha256RatherThanSlowTheStream(t *testing.T) {
	read := bytes.Repeat([]byte{0, 1, 2, 3}, 16<<10) // 64 KiB
	crcOf := func(n int) string {
		return fmt.Sprintf("crc32c %08x", crc32.Checksum(bytes.Repeat(read, n), crc32.MakeTable(crc32.Castagnoli)))
	}
	t.Run("output past the per-command cap is summarised by its crc32c alone", func(t *testing.T) {
		lines, _ := feed(t, Budget{}, 3*int64(len(read)), read, read, read, read)
		want := "binary output, 256.0 KiB, " + crcOf(4) + ", sha256 not computed: over the 192.0 KiB collected per command"
		if got := lines[len(lines)-1].Line; got != want {
			t.Errorf("summary %q\nwant %q", got, want)
		}
	})
	t.Run("output up to the cap gets its sha256", func(t *testing.T) {
		lines, _ := feed(t, Budget{}, 3*int64(len(read)), read, read, read)
		if got, want := lines[len(lines)-1].Line, "binary output, 192.0 KiB, "+sums(bytes.Repeat(read, 3)); got != want {
			t.Errorf("summary %q\nwant %q", got, want)
		}
	})
	t.Run("binary output past the byte budget is still summarised, not counted as lines", func(t *testing.T) {
		big := bytes.Repeat([]byte("text "), 1000)
		tail := append(bytes.Repeat([]byte("x"), 5000), 0, 1, 2) // binary only at its end
		lines, c := feed(t, Budget{}, 100, big, tail)
		want := fmt.Sprintf("binary output, 4.9 KiB, crc32c %08x, sha256 not computed: over the 100 B collected per command",
			crc32.Checksum(tail, crc32.MakeTable(crc32.Castagnoli)))
		if len(lines) != 1 || lines[0].Line != want || c.dropped != 1 {
			t.Errorf("lines %+v, %d dropped; want only %q and the one text line dropped", lines, c.dropped, want)
		}
	})
	t.Run("a hasher that falls behind is given up, not waited for", func(t *testing.T) {
		d := unstartedDigest(1 << 30) // its hasher never takes a copy
		for range digestBuffers + 1 {
			d.write(read)
		}
		want := "binary output, 576.0 KiB, " + crcOf(digestBuffers+1) + ", sha256 not computed: over budget"
		if got := d.summary(); got != want {
			t.Errorf("summary %q\nwant %q", got, want)
		}
	})
}

func TestTextCutMidRuneStaysText(t *testing.T) {
	text := []byte(strings.Repeat("é ü 🚀 日本\n", 2000))
	var reads [][]byte
	for b := text; len(b) > 0; {
		k := min(333, len(b)) // 333: reads end inside runes
		reads, b = append(reads, b[:k]), b[k:]
	}
	lines, c := feed(t, Budget{}, 0, reads...)
	if c.binary || len(lines) != 2000 || lines[1999].Line != "é ü 🚀 日本" {
		t.Errorf("binary %v, %d lines, want text and 2000 lines", c.binary, len(lines))
	}
}

func TestLooksBinary(t *testing.T) {
	for _, tt := range []struct {
		name string
		in   string
		want bool
	}{
		{"plain text is text", "hello world\n", false},
		{"UTF-8 cut at the end of a read is text", "héllo \xc3", false},
		{"UTF-8 cut at the start of a read is text", "\xa9llo", false},
		{"four continuation bytes are not a cut rune", "\xa9\xa9\xa9\xa9llo", true},
		{"ANSI colours and tabs are text", "\x1b[31mred\x1b[0m\tok\r\n", false},
		{"a single NUL is binary", "abc\x00def", true},
		{"invalid UTF-8 in the middle is binary", "ab\xffcd", true},
		{"many control bytes are binary", strings.Repeat("a\x01\x02\x03", 50), true},
		{"one stray control byte is text", "ring the bell\x07 once", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := looksBinary([]byte(tt.in)); got != tt.want {
				t.Errorf("looksBinary(%q) = %v", tt.in, got)
			}
		})
	}
}

func TestHumanBytes(t *testing.T) {
	for in, want := range map[int64]string{17: "17 B", 3072: "3.0 KiB", 1 << 30: "1.0 GiB", 3 << 30: "3.0 GiB", 1536 << 20: "1.5 GiB"} {
		if got := humanBytes(in); got != want {
			t.Errorf("humanBytes(%d) = %q, want %q", in, got, want)
		}
	}
}
