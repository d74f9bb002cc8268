package cove

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"connectrpc.com/connect"

	"github.com/cove-dev/cove/sdk/reason"
)

// cancelled explains a process stream that ended before its end event: it classifies the
// cause from the stream's context (context.Cause, never a guess from the error text),
// logs the one "stream cancelled" line, and returns the error for Wait.
//
// The causes, and what envd logs for the same request id:
//   - timeout: the command's Timeout or the context's deadline (envd: deadline, WARN);
//   - sibling_cancel: someone else cancelled the context, an errgroup sibling say; the
//     context's cause is cancel.detail (envd: client_cancel, INFO);
//   - caller_exit: NotifyExit's context ended (envd: client_cancel);
//   - disconnect: CommandHandle.Disconnect (envd: client_cancel);
//   - rpc_error: the transport or the server failed, with the Connect code.
func (s *streamRun) cancelled(streamErr error) error {
	h := s.h
	cause, detail := classify(s.ctx, streamErr)
	code := ""
	if cause == reason.CancelRPCError {
		code = connect.CodeOf(streamErr).String()
		if streamErr == nil {
			code = connect.CodeUnknown.String()
			detail = "the stream closed without an end event"
		}
	}

	var err error
	switch cause {
	case reason.CancelDisconnect:
		err = &Error{Op: h.method, SandboxID: h.e.sandboxID, Message: ErrDisconnect.Error(), RequestID: h.requestID, Err: ErrDisconnect}
	case reason.CancelRPCError:
		if streamErr == nil {
			streamErr = errors.New(detail)
		}
		err = rpcError(s.ctx, h.method, h.e.sandboxID, s.ci, streamErr)
		// A cut stream may mean the sandbox was killed under it: ask, as the E2B SDKs do.
		var killed *SandboxKilledError
		if !errors.As(err, &killed) && connect.CodeOf(streamErr) != connect.CodeNotFound {
			if k := s.probeKilled(); k != nil {
				err = k
			}
		}
	default:
		err = rpcError(s.ctx, h.method, h.e.sandboxID, s.ci, streamErr)
	}

	phase := reason.PhaseBeforeStart
	if s.begun {
		phase = reason.PhaseStreaming
	}
	attrs := []slog.Attr{
		slog.String(keyRequestID, h.requestID),
		slog.String(keySandboxID, h.e.sandboxID),
		slog.Int(keyPID, int(h.PID())),
		slog.String(keyRPCMethod, h.method),
		slog.String(keyStreamPhase, phase.String()),
		slog.String(keyCancelCause, cause.String()),
	}
	if detail != "" {
		attrs = append(attrs, slog.String(keyCancelDetail, detail))
	}
	if code != "" {
		attrs = append(attrs, slog.String(keyConnectCode, code))
	}
	var killed *SandboxKilledError
	if errors.As(err, &killed) {
		attrs = append(attrs, slog.String(keyKillReason, killed.Reason.String()))
	}
	attrs = append(attrs, slog.Int64(keyStreamBytesReceived, s.bytes))
	level := slog.LevelWarn
	if cause == reason.CancelDisconnect || cause == reason.CancelCallerExit {
		level = slog.LevelInfo
	}
	h.e.client.cfg.Logger.LogAttrs(s.logCtx, level, "stream cancelled", attrs...)
	return err
}

// classify names why a stream ended early. The stream's own context decides when it is
// done; otherwise the stream failed by itself.
func classify(ctx context.Context, streamErr error) (reason.CancelCause, string) {
	if ctx.Err() != nil {
		cause := context.Cause(ctx)
		switch {
		case errors.Is(cause, ErrDisconnect):
			return reason.CancelDisconnect, ""
		case errors.Is(cause, ErrCallerExit):
			return reason.CancelCallerExit, causeDetail(cause, ErrCallerExit)
		case errors.Is(cause, context.DeadlineExceeded): // ErrTimeout matches it too
			return reason.CancelTimeout, causeDetail(cause, context.DeadlineExceeded)
		default:
			return reason.CancelSibling, cause.Error()
		}
	}
	// envd's copy of the deadline (Connect-Timeout-Ms) can fire a moment before ours.
	if connect.CodeOf(streamErr) == connect.CodeDeadlineExceeded {
		if _, ok := ctx.Deadline(); ok {
			return reason.CancelTimeout, "envd ended the stream at the deadline"
		}
	}
	if streamErr == nil {
		return reason.CancelRPCError, ""
	}
	return reason.CancelRPCError, streamErr.Error()
}

// causeDetail is the cause's text when it says more than the bare sentinel.
func causeDetail(cause, sentinel error) string {
	if cause == sentinel {
		return ""
	}
	return cause.Error()
}

// probeKilled asks the API whether the stream's sandbox was killed.
func (s *streamRun) probeKilled() *SandboxKilledError {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.logCtx), 5*time.Second)
	defer cancel()
	_, err := s.h.e.client.Info(ctx, s.h.e.sandboxID)
	var killed *SandboxKilledError
	if errors.As(err, &killed) {
		return killed
	}
	return nil
}
