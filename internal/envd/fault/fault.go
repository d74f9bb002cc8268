// Package fault is envd's error vocabulary and the one place where it becomes a Connect
// code or an HTTP status. Every error a client sees names what failed, why, and the
// request id of the call.
package fault

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/cove-dev/cove/internal/envd/identity"
	"github.com/cove-dev/cove/internal/telemetry"
)

// Sentinels callers branch on. Wrap them with %w and a few words of where.
var (
	ErrInvalid         = errors.New("invalid argument")
	ErrNotFound        = errors.New("not found")
	ErrExists          = errors.New("already exists")
	ErrPermission      = errors.New("permission denied")
	ErrUnauthenticated = errors.New("unauthenticated")
	ErrNoSpace         = errors.New("not enough space")
	ErrTooLarge        = errors.New("too large")
	ErrFailedPrecond   = errors.New("failed precondition")
)

// Code returns the Connect code for err.
func Code(err error) connect.Code {
	var ce *connect.Error
	switch {
	case errors.As(err, &ce):
		return ce.Code()
	case errors.Is(err, identity.ErrUnknownUser):
		// E2B's envd answers an unknown user as an authentication failure (HTTP 401), and the
		// SDKs raise it as AuthenticationError.
		return connect.CodeUnauthenticated
	case errors.Is(err, ErrInvalid):
		return connect.CodeInvalidArgument
	case errors.Is(err, ErrNotFound):
		return connect.CodeNotFound
	case errors.Is(err, ErrExists):
		return connect.CodeAlreadyExists
	case errors.Is(err, ErrPermission), errors.Is(err, identity.ErrForbiddenUser):
		return connect.CodePermissionDenied
	case errors.Is(err, ErrUnauthenticated):
		return connect.CodeUnauthenticated
	case errors.Is(err, ErrNoSpace), errors.Is(err, ErrTooLarge):
		return connect.CodeResourceExhausted
	case errors.Is(err, ErrFailedPrecond):
		return connect.CodeFailedPrecondition
	case errors.Is(err, context.Canceled):
		return connect.CodeCanceled
	case errors.Is(err, context.DeadlineExceeded):
		return connect.CodeDeadlineExceeded
	}
	return connect.CodeInternal
}

// Connect turns err into a Connect error that carries the call's request id in its message
// and as a google.rpc.RequestInfo detail.
func Connect(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) && hasRequestInfo(ce) {
		return ce
	}
	id := telemetry.RequestID(ctx)
	msg := err.Error()
	if id != "" {
		msg = fmt.Sprintf("%s (request_id %s)", msg, id)
	}
	out := connect.NewError(Code(err), errors.New(msg))
	if id != "" {
		if d, derr := connect.NewErrorDetail(&errdetails.RequestInfo{RequestId: id}); derr == nil {
			out.AddDetail(d)
		}
	}
	return out
}

func hasRequestInfo(ce *connect.Error) bool {
	for _, d := range ce.Details() {
		if d.Type() == "google.rpc.RequestInfo" {
			return true
		}
	}
	return false
}

// Status returns the HTTP status for err, as envd's HTTP endpoints answer it.
func Status(err error) int {
	switch Code(err) {
	case connect.CodeInvalidArgument:
		return http.StatusBadRequest
	case connect.CodeNotFound:
		return http.StatusNotFound
	case connect.CodeAlreadyExists:
		return http.StatusConflict
	case connect.CodePermissionDenied:
		return http.StatusForbidden
	case connect.CodeUnauthenticated:
		return http.StatusUnauthorized
	case connect.CodeResourceExhausted:
		if errors.Is(err, ErrTooLarge) {
			return http.StatusRequestEntityTooLarge
		}
		return http.StatusInsufficientStorage
	case connect.CodeFailedPrecondition:
		return http.StatusPreconditionFailed
	}
	return http.StatusInternalServerError
}

// Body is the JSON error body of envd's HTTP endpoints: {"code","message"} as E2B sends,
// plus the request id.
type Body struct {
	Code      int    `json:"code"`
	Message   string `json:"message"`
	RequestID string `json:"requestId,omitempty"`
}

// WriteHTTP writes err as a JSON error with the status Status(err).
func WriteHTTP(ctx context.Context, w http.ResponseWriter, err error) {
	WriteHTTPStatus(ctx, w, Status(err), err.Error())
}

// WriteHTTPStatus writes a JSON error with the given status and message; a 5xx is also
// logged with its cause.
func WriteHTTPStatus(ctx context.Context, w http.ResponseWriter, status int, msg string) {
	id := telemetry.RequestID(ctx)
	if status >= http.StatusInternalServerError {
		// The logger on ctx carries the request id the client is shown.
		telemetry.Logger(ctx).Error("request failed", "status", status, "error", msg)
	}
	if id != "" {
		msg = fmt.Sprintf("%s (request_id %s)", msg, id)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(Body{Code: status, Message: msg, RequestID: id})
}
