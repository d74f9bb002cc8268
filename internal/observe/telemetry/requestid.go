package telemetry

import (
	"context"
	"net/http"

	"github.com/cove-dev/cove/sdk/requestid"
)

// Request id headers. Cove reads both, prefers the E2B one, and echoes HeaderRequestID.
const (
	HeaderRequestID    = requestid.Header
	HeaderRequestIDAlt = requestid.HeaderAlt
)

type requestIDKey struct{}

// WithRequestID returns a context carrying id, with a logger that logs it on every line.
func WithRequestID(ctx context.Context, id string) context.Context {
	ctx = context.WithValue(ctx, requestIDKey{}, id)
	return With(ctx, KeyRequestID, id)
}

// RequestID returns the context's request id, or "" when there is none.
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

// RequestIDFrom returns the request id a client sent in h, or "" when it sent none usable.
func RequestIDFrom(h http.Header) string {
	for _, name := range []string{HeaderRequestID, HeaderRequestIDAlt} {
		if id := h.Get(name); requestid.Valid(id) {
			return id
		}
	}
	return ""
}

// NewRequestID mints a request id (see requestid.New).
func NewRequestID() string { return requestid.New() }
