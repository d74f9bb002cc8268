package process

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/cove-dev/cove/sdk/envdapi"
)

// Sink carries what envd records about its processes to the host: each line a process
// writes (kind "output") and a record per command (kinds "command_start", "command_end"),
// as JSON lines on a writer, envd's stdout, a pipe the runtime owns. The host labels every
// line with the sandbox, template, team and metadata, redacts it and stores it: nothing here
// labels more than envd itself knows.
//
// Writes never block a process: lines queue for one writer goroutine and, past the rate
// limit or a full queue, are dropped and counted in the command's record.
type Sink struct {
	HeadBytes, TailBytes int // kept per stream for the command record; 4 KiB when 0
	LineMax              int // longer lines are split; 16 KiB when 0
	// CommandBytes caps the output one stream of a command sends as lines; 64 MiB when 0.
	// Past it, and past the sandbox's byte budget, output is dropped and counted; the head
	// and tail of the command record are kept whatever is dropped. It also caps the binary
	// output a stream's summary takes a sha256 of (its CRC-32C covers all of it).
	CommandBytes int64

	queue   chan []byte
	output  atomic.Bool // output lines on (command records are always kept)
	dropped atomic.Uint64
	lines   tokenBucket // lines per second, for the whole sandbox
	bytes   tokenBucket // bytes per second, for the whole sandbox
	done    chan struct{}
}

// Budget is a sink's rates for the whole sandbox: lines and bytes per second, each with a
// burst. A zero field takes its default: 5,000 lines/s with a burst of twice that, 1 MiB/s
// with a 16 MiB burst.
type Budget struct {
	LinesPerSec, LineBurst int
	BytesPerSec, ByteBurst int64
}

// margin is kept beyond each head and tail so the host can redact a secret that straddles
// the cut before cutting to the configured size.
const margin = 256

// NewSink starts a sink writing to w, with output limited to budget.
func NewSink(w io.Writer, budget Budget) *Sink {
	if budget.LinesPerSec <= 0 {
		budget.LinesPerSec = 5000
	}
	if budget.LineBurst <= 0 {
		budget.LineBurst = 2 * budget.LinesPerSec
	}
	if budget.BytesPerSec <= 0 {
		budget.BytesPerSec = 1 << 20
	}
	if budget.ByteBurst <= 0 {
		budget.ByteBurst = 16 << 20
	}
	s := &Sink{queue: make(chan []byte, 4096), done: make(chan struct{}),
		lines: tokenBucket{rate: float64(budget.LinesPerSec), burst: float64(budget.LineBurst)},
		bytes: tokenBucket{rate: float64(budget.BytesPerSec), burst: float64(budget.ByteBurst)}}
	s.output.Store(true)
	go s.run(w)
	return s
}

// SetOutput switches the collection of output lines (command records stay on).
func (s *Sink) SetOutput(on bool) { s.output.Store(on) }

// Dropped is how many lines the sink dropped.
func (s *Sink) Dropped() uint64 { return s.dropped.Load() }

// Close writes what is queued and stops.
func (s *Sink) Close() {
	close(s.queue)
	<-s.done
}

func (s *Sink) run(w io.Writer) {
	defer close(s.done)
	bw := bufio.NewWriterSize(w, 64<<10)
	pending := uint64(0) // lines in bw not yet written
	flush := func() {
		if err := bw.Flush(); err != nil {
			// A broken pipe (no host reads it): what was buffered is lost, counted. A
			// bufio.Writer stays broken after an error, so start a new one.
			s.dropped.Add(pending)
			bw.Reset(w)
		}
		pending = 0
	}
	for line := range s.queue {
		_, _ = bw.Write(line)
		pending++
		if len(s.queue) == 0 || bw.Buffered() == 0 {
			flush()
		}
	}
	flush()
}

// emit queues one JSON record; false when it was dropped.
func (s *Sink) emit(v any) bool {
	b, err := json.Marshal(v)
	if err != nil {
		return false
	}
	select {
	case s.queue <- append(b, '\n'):
		return true
	default:
		s.dropped.Add(1)
		return false
	}
}

func (s *Sink) headBytes() int {
	if s.HeadBytes > 0 {
		return s.HeadBytes
	}
	return 4 << 10
}

func (s *Sink) tailBytes() int {
	if s.TailBytes > 0 {
		return s.TailBytes
	}
	return 4 << 10
}

func (s *Sink) commandBytes() int64 {
	if s.CommandBytes > 0 {
		return s.CommandBytes
	}
	return 64 << 20
}

func (s *Sink) lineMax() int {
	if s.LineMax > 0 {
		return s.LineMax
	}
	return 16 << 10
}

// capture follows one output stream of one process: it splits lines for the sink and keeps
// the head and tail for the command record. Only its pump goroutine writes to it.
//
// The hot path decides what to keep before building anything: a read the budgets cannot take
// is counted (one bytes.Count) and dropped whole, and binary output is digested (see digest),
// never escaped.
type capture struct {
	sink         *Sink
	p            *proc
	stream       string
	partial      []byte
	head         []byte
	tail         []byte
	dropped      uint64 // lines
	bytesDropped uint64
	sent         int64 // bytes of output sent as lines
	skip         bool  // the line in progress was dropped: its rest is dropped too

	binary bool    // the stream turned out binary: no more lines, one summary at its end
	digest *digest // of the binary output

	batch      []byte // encoded lines of the current read, queued by send
	batchLines int
	now        time.Time // the current read's timestamp
}

func (c *capture) write(b []byte) {
	if hc := c.sink.headBytes() + margin; len(c.head) < hc {
		c.head = append(c.head, b[:min(len(b), hc-len(c.head))]...)
	}
	tc := c.sink.tailBytes() + margin
	c.tail = append(c.tail, b[max(0, len(b)-2*tc):]...)
	if len(c.tail) > 2*tc {
		c.tail = append(c.tail[:0], c.tail[len(c.tail)-tc:]...)
	}
	if !c.sink.output.Load() {
		return
	}
	if c.binary {
		c.toBinary(b)
		return
	}
	// Budgets first: a read that will be dropped is counted (one pass, bytes.Count), not
	// split or encoded, and only its ends are checked for binary output; a read that will be
	// kept is checked whole, since its lines will be encoded.
	keep := c.sent+int64(len(b)) <= c.sink.commandBytes() && c.sink.bytes.takeN(float64(len(b)))
	if keep && looksBinary(b) || !keep && endsLookBinary(b) {
		if keep {
			c.sink.bytes.give(float64(len(b)))
		}
		c.toBinary(b)
		return
	}
	if !keep {
		c.drop(b)
		return
	}
	c.sent += int64(len(b))
	// One read's lines go out as one batch: one timestamp, one queue send.
	c.batch, c.now = c.batch[:0], time.Now()
	// A token for each line the read ends, the one it leaves open and each lineMax piece.
	lines := c.sink.lines.takeUpTo(bytes.Count(b, []byte{'\n'}) + 1 + (len(c.partial)+len(b))/c.sink.lineMax())
	for len(b) > 0 {
		if lines == 0 {
			// No line token left: the rest of the read is counted, not split, and its bytes
			// go back to the byte budget.
			c.sent -= int64(len(b))
			c.sink.bytes.give(float64(len(b)))
			c.drop(b)
			break
		}
		seg, ended := b, false
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			seg, b, ended = b[:i], b[i+1:], true
		} else {
			b = nil
		}
		if c.skip {
			c.skip = !ended
			continue
		}
		lines = c.pieces(seg, ended, lines)
	}
	if lines > 0 {
		c.sink.lines.give(float64(lines))
	}
	c.send()
}

// pieces sends seg, the next bytes of the line in progress, as lines of at most lineMax bytes
// (all but the last of a line marked partial); what is left of an open line waits in
// c.partial, never more than lineMax bytes of it. It returns the line tokens left.
func (c *capture) pieces(seg []byte, ended bool, tokens int) int {
	limit := c.sink.lineMax()
	if len(c.partial) > 0 {
		take := min(len(seg), limit-len(c.partial))
		c.partial, seg = append(c.partial, seg[:take]...), seg[take:]
		if len(seg) == 0 && !ended {
			return tokens
		}
		tokens = c.line(c.partial, !ended || len(seg) > 0, tokens)
		c.partial = c.partial[:0]
		if len(seg) == 0 {
			return tokens
		}
	}
	for len(seg) > limit {
		tokens = c.line(seg[:limit], true, tokens)
		seg = seg[limit:]
	}
	if ended {
		return c.line(seg, false, tokens)
	}
	c.partial = append(c.partial, seg...)
	return tokens
}

// drop counts a read no line of which is sent: every line it touches is dropped, each
// counted once however many reads it spans.
func (c *capture) drop(b []byte) {
	nl := uint64(bytes.Count(b, []byte{'\n'}))
	n, open := nl, b[len(b)-1] != '\n'
	if c.skip && nl > 0 {
		n-- // its first newline ends a line counted already
	}
	if open && !(c.skip && nl == 0) {
		n++ // the line it leaves open, counted now
	}
	c.dropped += n
	c.bytesDropped += uint64(len(b)) + uint64(len(c.partial))
	c.sink.dropped.Add(n)
	c.partial = c.partial[:0]
	c.skip = open
}

// toBinary digests binary output; the first binary read ends the stream's lines.
func (c *capture) toBinary(b []byte) {
	if !c.binary {
		c.binary, c.digest = true, newDigest(c.sink.commandBytes())
		c.digest.write(c.partial)
		c.partial = nil
	}
	c.digest.write(b)
	c.bytesDropped += uint64(len(b))
}

// binarySample is how much of a read is checked for control bytes.
const binarySample = 512

// looksBinary tells whether a read is not text: a NUL, invalid UTF-8 (a rune cut at either
// end of the read is fine), or more than one in 16 control bytes in its first binarySample
// bytes.
func looksBinary(b []byte) bool {
	if bytes.IndexByte(b, 0) >= 0 {
		return true
	}
	for i := 0; i < utf8.UTFMax-1 && len(b) > 0 && !utf8.RuneStart(b[0]); i++ {
		b = b[1:] // the rest of a rune the last read cut
	}
	end := len(b)
	for i := 1; i <= utf8.UTFMax-1 && i <= len(b); i++ {
		if utf8.RuneStart(b[len(b)-i]) {
			if !utf8.FullRune(b[len(b)-i:]) {
				end = len(b) - i
			}
			break
		}
	}
	if !utf8.Valid(b[:end]) {
		return true
	}
	controls := 0
	for _, x := range b[:min(len(b), binarySample)] {
		if x < 0x20 && x != '\n' && x != '\r' && x != '\t' && x != '\b' && x != '\f' && x != 0x1b {
			controls++
		}
	}
	return controls*16 > min(len(b), binarySample)
}

// endsLookBinary is looksBinary of the first and last binarySample bytes of b.
func endsLookBinary(b []byte) bool {
	if len(b) <= 2*binarySample {
		return looksBinary(b)
	}
	return looksBinary(b[:binarySample]) || looksBinary(b[len(b)-binarySample:])
}

// send queues the lines batched since the last send.
func (c *capture) send() {
	if len(c.batch) == 0 {
		return
	}
	if !c.sink.queueLine(append([]byte(nil), c.batch...)) {
		c.dropped += uint64(c.batchLines)
	}
	c.batch, c.batchLines = c.batch[:0], 0
}

// flush emits a last line without its newline, at the end of the output, or the stream's one
// binary summary.
func (c *capture) flush() {
	if !c.sink.output.Load() {
		if c.digest != nil {
			c.digest.summary() // ends its hasher
		}
		return
	}
	c.now = time.Now()
	switch {
	case c.binary:
		summary := c.digest.summary()
		c.batch = envdapi.AppendOutputLine(c.batch, c.now, c.p.pid, c.stream, c.p.requestID, c.p.tag, []byte(summary), false)
		c.batch = append(c.batch[:len(c.batch)-2], `,"binary":true}`+"\n"...)
		c.batchLines++
	case len(c.partial) > 0 && !c.skip:
		if c.sink.lines.takeUpTo(1) == 1 {
			c.line(c.partial, true, 1)
		} else {
			c.dropped++
			c.sink.dropped.Add(1)
		}
	}
	c.partial = nil
	c.send()
}

// humanBytes writes n as 1.0 GiB, 12.5 MiB, 3.0 KiB or 17 B.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// line encodes one line when a line token is left (tokens), and returns the tokens left.
func (c *capture) line(b []byte, partial bool, tokens int) int {
	if tokens <= 0 {
		c.dropped++
		c.sink.dropped.Add(1)
		return 0
	}
	c.batch = envdapi.AppendOutputLine(c.batch, c.now, c.p.pid, c.stream, c.p.requestID, c.p.tag, bytes.TrimSuffix(b, []byte{'\r'}), partial)
	c.batchLines++
	return tokens - 1
}

// queueLine queues an encoded line (with its newline); false when it was dropped.
func (s *Sink) queueLine(b []byte) bool {
	select {
	case s.queue <- b:
		return true
	default:
		s.dropped.Add(1)
		return false
	}
}

func (c *capture) tailBytes() []byte {
	if tc := c.sink.tailBytes() + margin; len(c.tail) > tc {
		return c.tail[len(c.tail)-tc:]
	}
	return c.tail
}

// tokenBucket limits a rate without a timer: tokens are added as time passes.
type tokenBucket struct {
	mu     sync.Mutex
	rate   float64
	burst  float64
	tokens float64
	last   time.Time
}

func (b *tokenBucket) refill() {
	now := time.Now()
	if b.last.IsZero() {
		b.tokens = b.burst
	} else {
		b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	}
	b.last = now
}

// takeN takes n tokens, all or none; a bucket with no rate takes everything.
func (b *tokenBucket) takeN(n float64) bool {
	if b.rate <= 0 {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill()
	if b.tokens < n {
		return false
	}
	b.tokens -= n
	return true
}

// takeUpTo takes up to n whole tokens and returns how many it took.
func (b *tokenBucket) takeUpTo(n int) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill()
	got := min(n, int(b.tokens))
	b.tokens -= float64(got)
	return got
}

// give returns tokens taken and not used.
func (b *tokenBucket) give(n float64) {
	b.mu.Lock()
	b.tokens = min(b.burst, b.tokens+n)
	b.mu.Unlock()
}
