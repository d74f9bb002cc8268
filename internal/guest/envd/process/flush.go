package process

import (
	"context"
	"net/http"
	"strings"
	"sync"
)

// flushGate sits between connect-go and the response writer of a process stream. connect
// flushes after every message; while the stream has more events queued the gate holds those
// flushes, and the stream releases them once its queue is empty, so a burst of output leaves
// in few writes and an idle stream still gets every event at once.
//
// While holding, the gate also gathers the messages written (connect writes each as a 5-byte
// prefix then the payload) and passes them on in writes of up to gatherSize: net/http's
// small buffers would otherwise turn each 32 KiB event into two syscalls and several chunks.
// Whatever is gathered goes out, in order, before any write made while not holding.
type flushGate struct {
	http.ResponseWriter
	flusher http.Flusher
	hold    bool
	pending bool
	buf     *[]byte // gathered writes; nil when none
	err     error   // of a gathered write that failed, reported by the next Write or Flush
}

// gatherSize is how much the gate gathers before it writes.
const gatherSize = 256 << 10

var gatherPool = sync.Pool{New: func() any { b := make([]byte, 0, gatherSize); return &b }}

func (g *flushGate) Write(p []byte) (int, error) {
	if !g.hold {
		if err := g.writeGathered(); err != nil {
			return 0, err
		}
		return g.ResponseWriter.Write(p)
	}
	if g.err != nil {
		return 0, g.err
	}
	if g.buf == nil {
		g.buf = gatherPool.Get().(*[]byte)
	}
	*g.buf = append(*g.buf, p...)
	if len(*g.buf) >= gatherSize {
		if err := g.writeGathered(); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// writeGathered passes on what was gathered.
func (g *flushGate) writeGathered() error {
	if g.err != nil {
		return g.err
	}
	if g.buf == nil {
		return nil
	}
	b := g.buf
	g.buf = nil
	_, err := g.ResponseWriter.Write(*b)
	if cap(*b) <= gatherSize*2 {
		*b = (*b)[:0]
		gatherPool.Put(b)
	}
	g.err = err
	return err
}

func (g *flushGate) Flush() {
	if g.hold {
		g.pending = true
		return
	}
	_ = g.writeGathered()
	g.flusher.Flush()
	g.pending = false
}

func (g *flushGate) Unwrap() http.ResponseWriter { return g.ResponseWriter }

// release stops holding and flushes what was held.
func (g *flushGate) release() {
	g.hold = false
	if g.pending || g.buf != nil {
		g.Flush()
	}
}

type gateKey struct{}

// HoldFlushes wraps the response writer of process streams (Start, Connect) with a flush
// gate the stream controls. Other requests pass through untouched.
func HoldFlushes(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, ok := w.(http.Flusher)
		if !ok || !strings.HasPrefix(r.URL.Path, "/process.Process/") ||
			!(strings.HasSuffix(r.URL.Path, "/Start") || strings.HasSuffix(r.URL.Path, "/Connect")) {
			next.ServeHTTP(w, r)
			return
		}
		g := &flushGate{ResponseWriter: w, flusher: f}
		next.ServeHTTP(g, r.WithContext(context.WithValue(r.Context(), gateKey{}, g)))
		// A stream that ended holding (its end event and connect's end of stream) leaves
		// what it gathered to be written here, unflushed: net/http's end of the response
		// flushes it with its own last bytes, in one write.
		g.hold = false
		_ = g.writeGathered()
	})
}

// gateFrom returns the stream's flush gate, or a gate that never holds when there is none.
func gateFrom(ctx context.Context) *gateControl {
	g, _ := ctx.Value(gateKey{}).(*flushGate)
	return &gateControl{g: g}
}

// gateControl is the stream's handle on its gate; a nil gate makes it do nothing.
type gateControl struct {
	g        *flushGate
	finished bool // the stream sent its last event: the gate holds until the handler returns
}

// finish leaves the gate holding: what the stream and connect still write goes out when
// the handler returns (see HoldFlushes).
func (c *gateControl) finish() { c.finished = true }

func (c *gateControl) setHold(hold bool) {
	if c.g != nil {
		c.g.hold = hold
	}
}

func (c *gateControl) release() {
	if c.g != nil && !c.finished {
		c.g.release()
	}
}
