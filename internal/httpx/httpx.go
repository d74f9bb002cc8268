// Package httpx is Cove's one HTTP edge, shared by the API with its team routes, /metrics,
// the console, the proxy and envd: the one middleware chain (Chain: request id, access line,
// recovery, authentication, error mapping) and its route table type, the status recorder
// behind every access line, panic recovery that names the request id, and JSON (error)
// answers in E2B's shape.
//
// The one idea: a request's id is settled once, at the outermost edge that sees it (taken
// from an outer middleware's context, the client's X-E2B-Request-Id or X-Request-Id, or
// minted), echoed in the response, and put in the context with a logger that logs it; every
// inner edge finds it there and does not mint another.
//
// httpx imports only telemetry and errdefs; it must not import a room (api, proxy, envd).
package httpx

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/cove-dev/cove/internal/errdefs"
	"github.com/cove-dev/cove/internal/observe/telemetry"
)

// RequestContext returns r's context carrying the request id and a logger that logs it, and
// the id: an outer edge's from the context, else the client's header, else a new one (also
// set on r's headers, so a proxied request carries it). It echoes the id in w's headers.
// With base, the context's logger becomes base (with the id).
func RequestContext(w http.ResponseWriter, r *http.Request, base *slog.Logger) (context.Context, string) {
	ctx := r.Context()
	id := telemetry.RequestID(ctx)
	fromCtx := id != ""
	if id == "" {
		id = telemetry.RequestIDFrom(r.Header)
	}
	if id == "" {
		id = telemetry.NewRequestID()
		r.Header.Set(telemetry.HeaderRequestID, id)
	}
	w.Header().Set(telemetry.HeaderRequestID, id)
	if base != nil {
		return telemetry.WithRequestID(telemetry.WithLogger(ctx, base), id), id
	}
	if !fromCtx {
		ctx = telemetry.WithRequestID(ctx, id)
	}
	return ctx, id
}

// RequestIDs is RequestContext as a middleware.
func RequestIDs(base *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, _ := RequestContext(w, r, base)
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// Recorder remembers the status and the body size written, for the access line. It passes
// Flush on, and Unwrap lets http.ResponseController reach the writer beneath.
type Recorder struct {
	http.ResponseWriter
	Status int   // the first status written; 0 until then
	Bytes  int64 // body bytes written
}

// WriteHeader records the first status.
func (r *Recorder) WriteHeader(code int) {
	if r.Status == 0 {
		r.Status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

// Write records an implicit 200 and counts the bytes.
func (r *Recorder) Write(b []byte) (int, error) {
	if r.Status == 0 {
		r.Status = http.StatusOK
	}
	n, err := r.ResponseWriter.Write(b)
	r.Bytes += int64(n)
	return n, err
}

// Flush sends what is buffered.
func (r *Recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap returns the writer beneath.
func (r *Recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// StatusOr is the recorded status, or def when nothing was written.
func (r *Recorder) StatusOr(def int) int {
	if r.Status == 0 {
		return def
	}
	return r.Status
}

// AccessAttrs are the attributes every access line starts with (OpenTelemetry's names).
func AccessAttrs(r *http.Request, status int, begun time.Time) []any {
	return []any{
		telemetry.KeyHTTPMethod, r.Method,
		telemetry.KeyURLPath, r.URL.Path,
		telemetry.KeyHTTPStatus, status,
		telemetry.KeyDurationMS, float64(time.Since(begun).Microseconds()) / 1000,
	}
}

// AccessLevel is the one level rule of every edge's access line (the API, the proxy, the
// console, /metrics): INFO for an answer and for the client's own mistake (a 4xx, which the
// line names); ERROR for the server's own failure (500, 501, 507…); WARN for an answer the
// client saw cut or gave up on (a stream cut after it began, a client gone) and for an
// upstream that failed or timed out (502, 503, 504: a sandbox paused or killed meanwhile).
func AccessLevel(status int, err error) slog.Level {
	switch {
	case err == nil:
		return slog.LevelInfo
	case status == http.StatusBadGateway || status == http.StatusServiceUnavailable || status == http.StatusGatewayTimeout:
		return slog.LevelWarn
	case status >= 500:
		return slog.LevelError
	case status >= 400 && status != errdefs.StatusClientClosed:
		return slog.LevelInfo
	default:
		return slog.LevelWarn
	}
}

// LogAccess writes r's one access line, msg naming the edge ("api request"), at AccessLevel:
// its method, path, status and duration, the note's attributes and error, and extra.
func LogAccess(ctx context.Context, msg string, r *http.Request, status int, begun time.Time, note *Note, extra ...any) {
	attrs := append(AccessAttrs(r, status, begun), extra...)
	var err error
	if note != nil {
		attrs = append(attrs, note.Attrs...)
		err = note.Err
	}
	if err != nil {
		attrs = append(attrs, telemetry.KeyError, err.Error())
	}
	telemetry.Logger(ctx).Log(ctx, AccessLevel(status, err), msg, attrs...)
}

// StatusClass is a status's bounded metric label: "2xx", "4xx"…
func StatusClass(status int) string { return strconv.Itoa(status/100) + "xx" }

// Recover answers a handler's panic with a 500 naming the request id (when nothing was
// written yet) and logs it with its stack, instead of net/http's bare dropped connection.
// http.ErrAbortHandler, a deliberate abort, passes through.
func Recover(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &Recorder{ResponseWriter: w}
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler {
				panic(v)
			}
			ctx := r.Context()
			telemetry.Logger(ctx).Error("handler panic", telemetry.KeyHTTPMethod, r.Method, telemetry.KeyURLPath, r.URL.Path,
				telemetry.KeyError, fmt.Sprint(v), telemetry.KeyStack, string(debug.Stack()))
			if rec.Status != 0 {
				panic(http.ErrAbortHandler) // the answer began: cut the connection, do not log twice
			}
			err := fmt.Errorf("internal error: %s %s failed in the server", r.Method, r.URL.Path)
			NoteFrom(ctx).Err = err
			WriteError(ctx, rec, err)
		}()
		next.ServeHTTP(rec, r)
	})
}

// WriteJSON writes v as JSON with the status code.
func WriteJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// The edges' own errors, the same for every edge: a request the client got wrong, and a
// caller without valid credentials.
var (
	ErrBadRequest   = errdefs.New(errdefs.ErrInvalidArgument, "bad request")
	ErrUnauthorized = errdefs.New(errdefs.ErrUnauthenticated, "unauthorized")
)

// WriteError answers err with errdefs.Status(err) and E2B's body naming the request id.
func WriteError(ctx context.Context, w http.ResponseWriter, err error) {
	WriteErrorStatus(ctx, w, errdefs.Status(err), err.Error())
}

// WriteErrorStatus answers with status and E2B's body of msg and the request id. A 401 says
// how to authenticate.
func WriteErrorStatus(ctx context.Context, w http.ResponseWriter, status int, msg string) {
	if status == http.StatusUnauthorized && w.Header().Get("WWW-Authenticate") == "" {
		w.Header().Set("WWW-Authenticate", `Bearer realm="cove"`)
	}
	WriteJSON(w, status, errdefs.NewBody(status, msg, telemetry.RequestID(ctx)))
}

// Note is what a request's handlers learn that its edge's access line reports: the error the
// request failed with and the attributes found on the way (the sandbox, the team).
type Note struct {
	Err   error
	Attrs []any  // key, value pairs
	Route string // the route table's pattern that served the request; "" when none did
}

// Add records attributes for the access line.
func (n *Note) Add(attrs ...any) { n.Attrs = append(n.Attrs, attrs...) }

type noteKey struct{}

// WithNote returns ctx carrying a new Note for the access line.
func WithNote(ctx context.Context) (context.Context, *Note) {
	n := &Note{}
	return context.WithValue(ctx, noteKey{}, n), n
}

// NoteFrom returns ctx's Note, or a throwaway one when the edge keeps none.
func NoteFrom(ctx context.Context) *Note {
	if n, ok := ctx.Value(noteKey{}).(*Note); ok {
		return n
	}
	return &Note{}
}
