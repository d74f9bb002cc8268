package proxy

import (
	"io"
	"net/http"
	"sync"
	"time"
)

// guardedBody is the request body the reverse proxy's transport reads. It lets the handler
// end any read still in flight before it returns, so net/http never reads the body at the
// same time as the transport (golang/go#68560: "invalid concurrent Body.Read call").
//
// Full duplex must stay on: without it net/http closes the body as soon as the response
// headers go out, and a transport still sending the body's last bytes (a chunked body's end)
// fails and drops the upstream connection mid-stream.
type guardedBody struct {
	body io.ReadCloser

	mu      sync.Mutex
	cond    *sync.Cond
	active  int
	closed  bool
	drained bool
}

func guard(body io.ReadCloser) *guardedBody {
	g := &guardedBody{body: body}
	g.cond = sync.NewCond(&g.mu)
	return g
}

func (g *guardedBody) Read(p []byte) (int, error) {
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
func (g *guardedBody) Close() error { return nil }

// finish stops further reads and waits for one in flight, cutting it with a read deadline
// on the client's connection when it does not end by itself.
func (g *guardedBody) finish(rc *http.ResponseController) {
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

// drain finishes the guard, then reads what is left of the client's body (up to 1 MiB), so
// that an answer written without the upstream having consumed it leaves the connection
// reusable: with full duplex on, net/http would otherwise race its own reads of the unread
// body against the next request (golang/go#68560).
func (g *guardedBody) drain(rc *http.ResponseController) {
	g.mu.Lock()
	drained := g.drained
	g.drained = true
	g.mu.Unlock()
	g.finish(rc)
	if !drained {
		_, _ = io.Copy(io.Discard, io.LimitReader(g.body, 1<<20))
	}
}
