package cove

import (
	"context"

	"github.com/cove-dev/cove/sdk/requestid"
)

// HeaderRequestID carries a call's request id to Cove, which echoes it back, logs it on
// every line of the call and passes it on to envd.
const HeaderRequestID = requestid.Header

// NewRequestID mints a unique id that sorts by creation time, the same form the server mints.
func NewRequestID() string { return requestid.New() }

type requestIDKey struct{}

// WithRequestID returns a context whose calls send id instead of minting one. Use it to
// know a call's id before it returns (calls that return only an error), or to carry an id
// of your own across services. Every call made with the context sends the same id.
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDKey{}, id)
}

// requestIDFor returns the id the caller set with WithRequestID, or a new one.
func requestIDFor(ctx context.Context) string {
	if id, ok := ctx.Value(requestIDKey{}).(string); ok && id != "" {
		return id
	}
	return NewRequestID()
}
