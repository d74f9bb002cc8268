package process

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cove-dev/cove/internal/envd/envdapi"
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

	queue   chan []byte
	output  atomic.Bool // output lines on (command records are always kept)
	dropped atomic.Uint64
	bucket  tokenBucket
	done    chan struct{}
}

// margin is kept beyond each head and tail so the host can redact a secret that straddles
// the cut before cutting to the configured size.
const margin = 256

// NewSink starts a sink writing to w, with output lines limited to linesPerSec (with a
// burst of twice that).
func NewSink(w io.Writer, linesPerSec int) *Sink {
	if linesPerSec <= 0 {
		linesPerSec = 5000
	}
	s := &Sink{queue: make(chan []byte, 4096), done: make(chan struct{}),
		bucket: tokenBucket{rate: float64(linesPerSec), burst: float64(2 * linesPerSec)}}
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
	for line := range s.queue {
		_, _ = bw.Write(line)
		if len(s.queue) == 0 {
			_ = bw.Flush()
		}
	}
	_ = bw.Flush()
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

func (s *Sink) lineMax() int {
	if s.LineMax > 0 {
		return s.LineMax
	}
	return 16 << 10
}

// capture follows one output stream of one process: it splits lines for the sink and keeps
// the head and tail for the command record. Only its pump goroutine writes to it.
type capture struct {
	sink    *Sink
	p       *proc
	stream  string
	partial []byte
	head    []byte
	tail    []byte
	dropped uint64

	batch      []byte // encoded lines of the current read, queued by send
	batchLines int
	now        time.Time // the current read's timestamp
}

func (c *capture) write(b []byte) {
	if hc := c.sink.headBytes() + margin; len(c.head) < hc {
		c.head = append(c.head, b[:min(len(b), hc-len(c.head))]...)
	}
	tc := c.sink.tailBytes() + margin
	c.tail = append(c.tail, b...)
	if len(c.tail) > 2*tc {
		c.tail = append(c.tail[:0], c.tail[len(c.tail)-tc:]...)
	}
	if !c.sink.output.Load() {
		return
	}
	// One read's lines go out as one batch: one timestamp, one queue send.
	c.batch, c.now = c.batch[:0], time.Now()
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			c.partial = append(c.partial, b...)
			for len(c.partial) >= c.sink.lineMax() {
				c.line(c.partial[:c.sink.lineMax()], true)
				c.partial = append(c.partial[:0], c.partial[c.sink.lineMax():]...)
			}
			break
		}
		if len(c.partial) > 0 {
			c.partial = append(c.partial, b[:i]...)
			c.line(c.partial, false)
			c.partial = c.partial[:0]
		} else {
			c.line(b[:i], false)
		}
		b = b[i+1:]
	}
	c.send()
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

// flush emits a last line without its newline, at the end of the output.
func (c *capture) flush() {
	if len(c.partial) > 0 && c.sink.output.Load() {
		c.now = time.Now()
		c.line(c.partial, true)
		c.partial = nil
		c.send()
	}
}

func (c *capture) line(b []byte, partial bool) {
	if !c.sink.bucket.take() {
		c.dropped++
		c.sink.dropped.Add(1)
		return
	}
	c.batch = envdapi.AppendOutputLine(c.batch, c.now, c.p.pid, c.stream, c.p.requestID, c.p.tag, bytes.TrimSuffix(b, []byte{'\r'}), partial)
	c.batchLines++
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

func (b *tokenBucket) take() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	if b.last.IsZero() {
		b.tokens = b.burst
	} else {
		b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	}
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}
