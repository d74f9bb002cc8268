package errdefs_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"connectrpc.com/connect"

	"github.com/cove-dev/cove/internal/errdefs"
)

func TestEveryKindMapsToOneStatusAndCode(t *testing.T) {
	errMissing := errdefs.New(errdefs.ErrNotFound, "sandbox not found")
	tests := []struct {
		name       string
		err        error
		wantStatus int
		wantCode   connect.Code
	}{
		{"a package's not-found sentinel, wrapped, is 404 and not_found", fmt.Errorf("get i1: %w", errMissing), http.StatusNotFound, connect.CodeNotFound},
		{"an invalid argument is 400", errdefs.New(errdefs.ErrInvalidArgument, "bad"), http.StatusBadRequest, connect.CodeInvalidArgument},
		{"a conflict is 409 and already_exists", errdefs.New(errdefs.ErrConflict, "taken"), http.StatusConflict, connect.CodeAlreadyExists},
		{"unauthenticated is 401", errdefs.ErrUnauthenticated, http.StatusUnauthorized, connect.CodeUnauthenticated},
		{"permission denied is 403", errdefs.ErrPermissionDenied, http.StatusForbidden, connect.CodePermissionDenied},
		{"a failed precondition is 412", errdefs.ErrFailedPrecondition, http.StatusPreconditionFailed, connect.CodeFailedPrecondition},
		{"too large is 413 and resource_exhausted", errdefs.ErrTooLarge, http.StatusRequestEntityTooLarge, connect.CodeResourceExhausted},
		{"resource exhausted is 429", errdefs.ErrResourceExhausted, http.StatusTooManyRequests, connect.CodeResourceExhausted},
		{"unavailable is 503", errdefs.ErrUnavailable, http.StatusServiceUnavailable, connect.CodeUnavailable},
		{"not implemented is 501 and unimplemented", errdefs.ErrNotImplemented, http.StatusNotImplemented, connect.CodeUnimplemented},
		{"a deadline is 504", fmt.Errorf("wait: %w", context.DeadlineExceeded), http.StatusGatewayTimeout, connect.CodeDeadlineExceeded},
		{"a client gone is 499 and canceled", context.Canceled, errdefs.StatusClientClosed, connect.CodeCanceled},
		{"a Connect error keeps its code and gets its status", connect.NewError(connect.CodeNotFound, errors.New("x")), http.StatusNotFound, connect.CodeNotFound},
		{"anything else is 500 and internal", errors.New("disk on fire"), http.StatusInternalServerError, connect.CodeInternal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := errdefs.Status(tt.err); got != tt.wantStatus {
				t.Errorf("Status = %d, want %d", got, tt.wantStatus)
			}
			if got := errdefs.Code(tt.err); got != tt.wantCode {
				t.Errorf("Code = %v, want %v", got, tt.wantCode)
			}
		})
	}
	if !errors.Is(fmt.Errorf("w: %w", errMissing), errMissing) || errMissing.Error() != "sandbox not found" {
		t.Error("a sentinel is no longer itself")
	}
}

func TestABodyNamesTheRequestID(t *testing.T) {
	if b := errdefs.NewBody(404, "gone", "r9"); b.Code != 404 || b.Message != "gone (request id r9)" || b.RequestID != "r9" {
		t.Errorf("body %+v", b)
	}
}
