package httpx

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/cove-dev/cove/internal/errdefs"
	"github.com/cove-dev/cove/internal/observe/telemetry"
)

// Handler is a route's body: it writes the answer, or returns the error the chain answers
// (errdefs.Status and E2B's body naming the request id, unless the edge answers in a shape of
// its own).
type Handler func(w http.ResponseWriter, r *http.Request) error

// Auth is what a route's caller must show, a closed set.
type Auth string

const (
	// AuthNone lets anyone in: liveness, discovery documents, the sign-in page, the unrouted
	// answer, and a route whose handler checks a credential of its own (an upload link's
	// token, a sandbox's tokens at the proxy).
	AuthNone Auth = "none"
	// AuthTeam wants a team's credential (an API key, a console session): the caller and its
	// team go in the context (authz) and on the access line.
	AuthTeam Auth = "team"
	// AuthAdmin wants the operator's admin token.
	AuthAdmin Auth = "admin"
	// AuthSandbox wants a sandbox's own tokens where it keeps them (a private port's
	// traffic token; the access token that resumes a paused secure sandbox): the proxy's.
	AuthSandbox Auth = "sandbox"
	// AuthNode wants another cluster node's signature: the routes between nodes.
	AuthNode Auth = "node"
	// AuthOptional takes a credential when one is shown (a wrong one is refused) and lets
	// a caller without one in: /metrics, whose answer depends on who asks.
	AuthOptional Auth = "optional"
)

// String is the level's name, never "".
func (a Auth) String() string {
	if a == "" {
		return string(AuthNone)
	}
	return string(a)
}

// Route is one entry of an edge's route table: declared once, served through the chain.
type Route struct {
	Pattern string // net/http's "METHOD /path/{wildcard}"
	Auth    Auth
	Handler Handler
}

// Chain is the one middleware chain every listener serves through (the API with its team
// and admin routes, /metrics, the console, the proxy, the routes between cluster nodes), in
// one order:
//
//	request id → access line → recovery → authentication and team scope → error mapping → route
//
// The access line sits outside recovery so a panic's 500 is on it; authentication sits
// inside the route table, so each route asks for its own level. A listener says only its
// name, its logger, what authenticates it and how its errors look.
type Chain struct {
	// Edge names the listener: its access line is "<edge> request".
	Edge string
	// Logger is the listener's base logger; nil keeps the context's.
	Logger *slog.Logger
	// Authenticate checks r's credentials for level auth (never AuthNone) and returns r's
	// context with the caller and its team scope (authz.Caller, log attributes; the access
	// line's attributes go on NoteFrom(ctx)). Its error is answered like a route's. Nil
	// refuses every level but AuthNone with a 401.
	Authenticate func(r *http.Request, auth Auth) (context.Context, error)
	// Fail answers a route's or authentication's error; nil writes E2B's JSON body
	// (WriteError). The console answers with a page, the proxy in the caller's protocol.
	Fail func(w http.ResponseWriter, r *http.Request, err error)
	// Done runs after the access line with the answer's status (the edge's request counter).
	Done func(r *http.Request, status int, note *Note)
}

// Then serves h through the whole chain, authenticated at level auth.
func (c Chain) Then(auth Auth, h Handler) http.Handler {
	return c.edge(c.route("", auth, h))
}

// Routes serves a route table through the chain: each route is authenticated at its own
// level. A pattern twice panics, as http.ServeMux does.
func (c Chain) Routes(routes []Route) http.Handler {
	mux := http.NewServeMux()
	for _, rt := range routes {
		mux.Handle(rt.Pattern, c.route(rt.Pattern, rt.Auth, rt.Handler))
	}
	return c.edge(mux)
}

// edge is the chain's outer part: the request id, the access line and recovery.
func (c Chain) edge(next http.Handler) http.Handler {
	msg, guarded := c.Edge+" request", Recover(next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		begun := time.Now()
		ctx, _ := RequestContext(w, r, c.Logger)
		ctx, note := WithNote(ctx)
		rec := &Recorder{ResponseWriter: w}
		r = r.WithContext(ctx)
		defer func() {
			v := recover() // only an abort (or a panic after the answer began) passes Recover
			status := rec.Status
			switch {
			case status == 0 && (v != nil || note.Err != nil):
				status = errdefs.StatusClientClosed // nothing was answered: the client saw a cut
			case status == 0:
				status = http.StatusOK
			}
			if note.Err == nil && v != nil {
				note.Err = errors.New("response cut")
			}
			var extra []any
			if note.Route != "" {
				extra = append(extra, telemetry.KeyHTTPRoute, note.Route)
			}
			LogAccess(ctx, msg, r, status, begun, note, extra...)
			if c.Done != nil {
				c.Done(r, status, note)
			}
			if v != nil {
				panic(v)
			}
		}()
		guarded.ServeHTTP(rec, r)
	})
}

// route is the chain's inner part for one route: authentication at level auth, then h with
// its error answered.
func (c Chain) route(pattern string, auth Auth, h Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if pattern != "" {
			NoteFrom(r.Context()).Route = pattern
		}
		if auth != AuthNone && auth != "" {
			ctx, err := c.authenticate(r, auth)
			if err != nil {
				c.fail(w, r, err)
				return
			}
			r = r.WithContext(ctx)
		}
		if err := h(w, r); err != nil {
			c.fail(w, r, err)
		}
	})
}

func (c Chain) authenticate(r *http.Request, auth Auth) (context.Context, error) {
	if c.Authenticate == nil {
		return nil, fmt.Errorf("%w: %s authenticates no one", ErrUnauthorized, c.Edge)
	}
	return c.Authenticate(r, auth)
}

// fail records err for the access line and answers it.
func (c Chain) fail(w http.ResponseWriter, r *http.Request, err error) {
	NoteFrom(r.Context()).Err = err
	if c.Fail != nil {
		c.Fail(w, r, err)
		return
	}
	WriteError(r.Context(), w, err)
}

// Serve adapts a handler that answers its own errors to the chain's Handler.
func Serve(h http.Handler) Handler {
	return func(w http.ResponseWriter, r *http.Request) error {
		h.ServeHTTP(w, r)
		return nil
	}
}
