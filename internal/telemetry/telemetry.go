// Package telemetry carries Cove's request ids and structured logger through a context.
//
// The one idea: a request id and the facts known about a call (sandbox, team, operation) are
// attached to the context once, where they become known, and every log line below gets them
// for free through Logger(ctx).
package telemetry

import (
	"context"
	"io"
	"log/slog"
	"os"
)

// Log keys shared by every part of Cove. Same key, same meaning, everywhere.
const (
	KeyRequestID   = "request_id"
	KeyOperationID = "operation_id"
	KeyRPCMethod   = "rpc.method"
	KeyPID         = "process.pid"
	KeyExitCode    = "process.exit.code"
	KeySignal      = "process.signal"
	KeyStreamEnd   = "stream.end"
	KeyStreamPhase = "stream.phase"
	KeyCancelCause = "cancel.cause"
	KeyErrorType   = "error.type"
	KeySandboxID   = "sandbox.id"
	KeyTemplateID  = "template.id"
	KeyTeamID      = "team.id"
	KeyKillReason  = "kill_reason"
)

type loggerKey struct{}

// NewLogger returns Cove's JSON logger writing to w at the given level.
func NewLogger(w io.Writer, level slog.Leveler) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level}))
}

// WithLogger returns a context whose Logger is l.
func WithLogger(ctx context.Context, l *slog.Logger) context.Context {
	return context.WithValue(ctx, loggerKey{}, l)
}

// Logger returns the context's logger, or a JSON logger on stderr when none was set.
func Logger(ctx context.Context) *slog.Logger {
	if l, ok := ctx.Value(loggerKey{}).(*slog.Logger); ok && l != nil {
		return l
	}
	return defaultLogger
}

var defaultLogger = NewLogger(os.Stderr, slog.LevelInfo)

// With returns a context whose logger carries the given attributes on every line.
func With(ctx context.Context, args ...any) context.Context {
	return WithLogger(ctx, Logger(ctx).With(args...))
}
