package httpx

import (
	"io"
	"net/http"
	"sync"
	"time"
)

// GuardedBody is the request body a reverse proxy's transport reads (Cove's proxy into a
// sandbox, and a cluster node forwarding to another). It lets the handler
// end any read still in flight before it returns, so net/http never reads the body at the
// same time as the transport (golang/go#68560: "invalid concurrent Body.Read call").
//
// Full duplex must stay on: without it net/http closes the body as soon as the response
// headers go out, and a transport still sending the body's last bytes (a chunked body's end)
// fails and drops the upstream connection mid-stream.
type GuardedBody struct {
	body io.ReadCloser

	mu      sync.Mutex
	cond    *sync.Cond
	active  int
	closed  bool
	drained bool
}

// Guard wraps a handler's request body for a reverse proxy's transport; the handler calls
// Drain before it returns.
func Guard(body io.ReadCloser) *GuardedBody {
	g := &GuardedBody{body: body}
	g.cond = sync.NewCond(&g.mu)
	return g
}

func (g *GuardedBody) Read(p []byte) (int, error) {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return 0, io.EOF
	}
	g.active++
	g.mu.Unlock()
	n, err := g.body.Read(p)
	g.mu.Lock()
	g.active--
	g.cond.Broadcast()
	g.mu.Unlock()
	return n, err
}

// Close is the transport's: the handler still owns the underlying body.
func (g *GuardedBody) Close() error { return nil }

// finish stops further reads and waits for one in flight, cutting it with a read deadline
// on the client's connection when it does not end by itself.
func (g *GuardedBody) finish(rc *http.ResponseController) {
	g.mu.Lock()
	g.closed = true
	if g.active > 0 {
		g.mu.Unlock()
		// Cut the read; the connection is not reused after this. A writer that cannot
		// (an HTTP/2 stream ends its body itself) is not waited for: waiting could hang.
		if err := rc.SetReadDeadline(time.Now()); err != nil {
			return
		}
		g.mu.Lock()
		for g.active > 0 {
			g.cond.Wait()
		}
	}
	g.mu.Unlock()
}

// Drain finishes the guard, then reads what is left of the client's body (up to 1 MiB), so
// that an answer written without the upstream having consumed it leaves the connection
// reusable: with full duplex on, net/http would otherwise race its own reads of the unread
// body against the next request (golang/go#68560).
func (g *GuardedBody) Drain(rc *http.ResponseController) {
	g.mu.Lock()
	drained := g.drained
	g.drained = true
	g.mu.Unlock()
	g.finish(rc)
	if !drained {
		_, _ = io.Copy(io.Discard, io.LimitReader(g.body, 1<<20))
	}
}

// ServeProxied runs a reverse proxy for r the way a streaming proxy must (Cove's proxy into a
// sandbox, a cluster node forwarding to another): full duplex on, the body guarded while the
// transport reads it and drained before returning. Without full duplex, net/http discards the
// body's rest when the answer's headers go out, under the transport still sending it, and the
// upstream connection drops mid-answer; without the drain, net/http would hit the body's EOF
// while closing it after the handler, start a read of the connection there, and race the next
// request's (golang/go#68560). An ErrorHandler may drain the GuardedBody it finds in r.Body.
func ServeProxied(h http.Handler, w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	_ = rc.EnableFullDuplex()
	if r.Body == nil || r.Body == http.NoBody {
		h.ServeHTTP(w, r)
		return
	}
	body := Guard(r.Body)
	out := *r
	out.Body = body
	h.ServeHTTP(w, &out)
	body.Drain(rc)
}
