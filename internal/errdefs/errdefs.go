// Package errdefs is Cove's error taxonomy: the few kinds of failure a caller branches on,
// each mapped once to an HTTP status, a Connect code and E2B's JSON error body.
//
// The one idea: a package declares its sentinels on top of a kind
// (`ErrNotFound = errdefs.New(errdefs.ErrNotFound, "sandbox not found")`) and wraps them with %w
// and a few words of where; every HTTP edge (the API, the proxy, envd, the team APIs) then
// answers any error through Status, Code and NewBody, so the same failure gets the same status
// everywhere, and every message carries the request id in one format (requestid.Annotate).
//
// errdefs imports nothing of Cove's but requestid: every package may use it.
package errdefs

import (
	"context"
	"errors"
	"net/http"

	"connectrpc.com/connect"

	"github.com/cove-dev/cove/sdk/requestid"
)

// kind is a class of failure; its sentinel is what errors.Is matches.
type kind struct{ name string }

func (k *kind) Error() string { return k.name }

// The kinds. Match them with errors.Is; declare a package's own sentinels with New.
var (
	ErrInvalidArgument    error = &kind{"invalid argument"}
	ErrNotFound           error = &kind{"not found"}
	ErrConflict           error = &kind{"conflict"}
	ErrUnauthenticated    error = &kind{"unauthenticated"}
	ErrPermissionDenied   error = &kind{"permission denied"}
	ErrFailedPrecondition error = &kind{"failed precondition"}
	ErrResourceExhausted  error = &kind{"resource exhausted"}
	ErrTooLarge           error = &kind{"too large"}
	ErrNoSpace            error = &kind{"no space left"}
	ErrUnavailable        error = &kind{"unavailable"}
	ErrNotImplemented     error = &kind{"not implemented"}
)

// StatusClientClosed is nginx's status for a client that went away; it is only logged.
const StatusClientClosed = 499

// mapping is the one table from a kind to its HTTP status and Connect code.
var mapping = []struct {
	kind   error
	status int
	code   connect.Code
}{
	{ErrInvalidArgument, http.StatusBadRequest, connect.CodeInvalidArgument},
	{ErrNotFound, http.StatusNotFound, connect.CodeNotFound},
	{ErrConflict, http.StatusConflict, connect.CodeAlreadyExists},
	{ErrUnauthenticated, http.StatusUnauthorized, connect.CodeUnauthenticated},
	{ErrPermissionDenied, http.StatusForbidden, connect.CodePermissionDenied},
	{ErrFailedPrecondition, http.StatusPreconditionFailed, connect.CodeFailedPrecondition},
	{ErrTooLarge, http.StatusRequestEntityTooLarge, connect.CodeResourceExhausted},
	{ErrResourceExhausted, http.StatusTooManyRequests, connect.CodeResourceExhausted},
	{ErrNoSpace, http.StatusInsufficientStorage, connect.CodeResourceExhausted},
	{ErrUnavailable, http.StatusServiceUnavailable, connect.CodeUnavailable},
	{ErrNotImplemented, http.StatusNotImplemented, connect.CodeUnimplemented},
	{context.DeadlineExceeded, http.StatusGatewayTimeout, connect.CodeDeadlineExceeded},
	{context.Canceled, StatusClientClosed, connect.CodeCanceled},
}

// defined is a package's sentinel of a kind: its own message, matching the kind.
type defined struct {
	kind error
	msg  string
}

func (d *defined) Error() string { return d.msg }
func (d *defined) Unwrap() error { return d.kind }

// New returns a sentinel with its own message that errors.Is matches both as itself and as
// kind (one of the Err* kinds above).
func New(kind error, msg string) error { return &defined{kind: kind, msg: msg} }

// marked is an error of another package that a Cove sentinel classifies.
type marked struct{ err, as error }

func (m *marked) Error() string   { return m.err.Error() }
func (m *marked) Unwrap() []error { return []error{m.err, m.as} }

// Mark returns err, with its message, matching sentinel as too: how an error of a package
// that cannot import errdefs (the SDK's shared code) gets its kind at Cove's edge.
func Mark(err, as error) error {
	if err == nil {
		return nil
	}
	return &marked{err: err, as: as}
}

// Status returns the HTTP status for err: its kind's, a Connect error's code's, or 500.
func Status(err error) int {
	for _, m := range mapping {
		if errors.Is(err, m.kind) {
			return m.status
		}
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		for _, m := range mapping {
			if m.code == ce.Code() {
				return m.status
			}
		}
	}
	return http.StatusInternalServerError
}

// Code returns the Connect code for err: a Connect error's own, its kind's, or internal.
func Code(err error) connect.Code {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Code()
	}
	for _, m := range mapping {
		if errors.Is(err, m.kind) {
			return m.code
		}
	}
	return connect.CodeInternal
}

// Body is E2B's JSON error body, {"code","message"}, plus the request id.
type Body struct {
	Code      int    `json:"code"`
	Message   string `json:"message"`
	RequestID string `json:"requestId,omitempty"`
}

// NewBody is the body of an answer with status code and message msg to the call requestID.
func NewBody(code int, msg, requestID string) Body {
	return Body{Code: code, Message: requestid.Annotate(msg, requestID), RequestID: requestID}
}
