package process

import (
	"context"
	"net/http"
	"strings"
)

// flushGate sits between connect-go and the response writer of a process stream. connect
// flushes after every message; while the stream has more events queued the gate holds those
// flushes, and the stream releases them once its queue is empty, so a burst of output leaves
// in few writes and an idle stream still gets every event at once.
type flushGate struct {
	http.ResponseWriter
	flusher http.Flusher
	hold    bool
	pending bool
}

func (g *flushGate) Flush() {
	if g.hold {
		g.pending = true
		return
	}
	g.flusher.Flush()
	g.pending = false
}

func (g *flushGate) Unwrap() http.ResponseWriter { return g.ResponseWriter }

// release stops holding and flushes what was held.
func (g *flushGate) release() {
	g.hold = false
	if g.pending {
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
	})
}

// gateFrom returns the stream's flush gate, or a gate that never holds when there is none.
func gateFrom(ctx context.Context) *gateControl {
	g, _ := ctx.Value(gateKey{}).(*flushGate)
	return &gateControl{g: g}
}

// gateControl is the stream's handle on its gate; a nil gate makes it do nothing.
type gateControl struct{ g *flushGate }

func (c *gateControl) setHold(hold bool) {
	if c.g != nil {
		c.g.hold = hold
	}
}

func (c *gateControl) release() {
	if c.g != nil {
		c.g.release()
	}
}
