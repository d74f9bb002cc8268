// Package fault is envd's error vocabulary and the one place where it becomes a Connect
// code or an HTTP status. Every error a client sees names what failed, why, and the
// request id of the call.
package fault

import (
	"context"
	"errors"
	"net/http"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/cove-dev/cove/internal/errdefs"
	"github.com/cove-dev/cove/internal/guest/envd/identity"
	"github.com/cove-dev/cove/internal/httpx"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/sdk/requestid"
)

// Sentinels callers branch on, of errdefs' kinds. Wrap them with %w and a few words of where.
var (
	ErrInvalid         = errdefs.New(errdefs.ErrInvalidArgument, "invalid argument")
	ErrNotFound        = errdefs.New(errdefs.ErrNotFound, "not found")
	ErrExists          = errdefs.New(errdefs.ErrConflict, "already exists")
	ErrPermission      = errdefs.New(errdefs.ErrPermissionDenied, "permission denied")
	ErrUnauthenticated = errdefs.New(errdefs.ErrUnauthenticated, "unauthenticated")
	ErrNoSpace         = errdefs.New(errdefs.ErrResourceExhausted, "not enough space")
	ErrTooLarge        = errdefs.New(errdefs.ErrTooLarge, "too large")
	ErrFailedPrecond   = errdefs.New(errdefs.ErrFailedPrecondition, "failed precondition")
)

// Code returns the Connect code for err: errdefs.Code, but for the identity errors.
func Code(err error) connect.Code {
	switch {
	case errors.Is(err, identity.ErrUnknownUser):
		// E2B's envd answers an unknown user as an authentication failure (HTTP 401), and the
		// SDKs raise it as AuthenticationError.
		return connect.CodeUnauthenticated
	case errors.Is(err, identity.ErrForbiddenUser):
		return connect.CodePermissionDenied
	}
	return errdefs.Code(err)
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
	out := connect.NewError(Code(err), errors.New(requestid.Annotate(err.Error(), id)))
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

// Status returns the HTTP status for err, as envd's HTTP endpoints answer it: errdefs.Status,
// but a full disk is 507 and the identity errors are 401 and 403.
func Status(err error) int {
	switch {
	case errors.Is(err, ErrNoSpace):
		return http.StatusInsufficientStorage
	case errors.Is(err, identity.ErrUnknownUser):
		return http.StatusUnauthorized
	case errors.Is(err, identity.ErrForbiddenUser):
		return http.StatusForbidden
	}
	return errdefs.Status(err)
}

// WriteHTTP writes err as a JSON error with the status Status(err).
func WriteHTTP(ctx context.Context, w http.ResponseWriter, err error) {
	WriteHTTPStatus(ctx, w, Status(err), err.Error())
}

// WriteHTTPStatus writes a JSON error with the given status and message; a 5xx is also
// logged with its cause.
func WriteHTTPStatus(ctx context.Context, w http.ResponseWriter, status int, msg string) {
	if status >= http.StatusInternalServerError {
		// The logger on ctx carries the request id the client is shown.
		telemetry.Logger(ctx).Error("request failed", telemetry.KeyHTTPStatus, status, telemetry.KeyError, msg)
	}
	httpx.WriteErrorStatus(ctx, w, status, msg)
}
