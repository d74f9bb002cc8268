// Package telemetry carries Cove's request ids and structured logger through a context.
//
// The one idea: a request id and the facts known about a call (sandbox, team, operation) are
// attached to the context once, where they become known, and every log line below gets them
// for free through Logger(ctx).
//
// It owns the context logger, request ids in contexts, the metric and log-key registries and
// OTel. It must not import the store, the orchestrator, the edges (api, proxy, httpx) or envd:
// everything imports it.
package telemetry

import (
	"context"
	"io"
	"log/slog"
	"os"
	"slices"
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
	KeySuppressed  = "log.suppressed"

	// A command's facts: who signalled it, why it ended, as whom and where it ran.
	KeySignalRequestID = "signal.request_id"
	KeyEndCause        = "end_cause"
	KeyUser            = "user"
	KeyCwd             = "cwd"

	// The HTTP edges' access lines (OpenTelemetry's names) and their common facts.
	KeyHTTPMethod   = "http.request.method"
	KeyHTTPRoute    = "http.route"
	KeyHTTPStatus   = "http.response.status_code"
	KeyHTTPBodySize = "http.response.body.size"
	KeyURLPath      = "url.path"
	KeyDurationMS   = "duration_ms"
	KeyError        = "error"
	KeyStack        = "stack"
	KeySandboxPort  = "sandbox.port"
	KeyAPIKeyID     = "api_key.id"
)

type loggerKey struct{}

// NewLogger returns Cove's JSON logger writing to w at the given level. Its lines carry
// trace_id and span_id when their context has a span, and reach the OTLP collector too
// while SetupOTel exports.
func NewLogger(w io.Writer, level slog.Leveler) *slog.Logger {
	return slog.New(newLogHandler(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level})))
}

// WithLogger returns a context whose Logger is l. The fields With added to the previous
// logger are forgotten along with it.
func WithLogger(ctx context.Context, l *slog.Logger) context.Context {
	ctx = context.WithValue(ctx, fieldsKey{}, []string(nil))
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

type fieldsKey struct{}

// With returns a context whose logger carries the given key-value pairs on every line. A key
// the context's logger already carries is not added again: JSON lines keep unique keys.
func With(ctx context.Context, args ...any) context.Context {
	// The keys carried so far: a few, so a slice (a map cost a third of this call).
	have, _ := ctx.Value(fieldsKey{}).([]string)
	next := have[:len(have):len(have)] // appending copies: have is shared
	var keep []any
	for i := 0; i+1 < len(args); i += 2 {
		k, ok := args[i].(string)
		if !ok {
			keep = append(keep, args[i], args[i+1])
			continue
		}
		if slices.Contains(next, k) {
			continue
		}
		next = append(next, k)
		keep = append(keep, k, args[i+1])
	}
	if len(keep) == 0 {
		return ctx
	}
	l := Logger(ctx).With(keep...)
	return context.WithValue(context.WithValue(ctx, loggerKey{}, l), fieldsKey{}, next)
}

type callerKey struct{}

type caller struct{ team, apiKey, apiKeyName string }

// WithCaller records who made the call: the authenticated team and API key (id and name).
// Events and records read it to say who caused them.
func WithCaller(ctx context.Context, teamID, apiKeyID, apiKeyName string) context.Context {
	return context.WithValue(ctx, callerKey{}, caller{team: teamID, apiKey: apiKeyID, apiKeyName: apiKeyName})
}

// CallerKeyName returns the name of the API key that made the call, "" when none did.
func CallerKeyName(ctx context.Context) string {
	c, _ := ctx.Value(callerKey{}).(caller)
	return c.apiKeyName
}

// Caller returns the call's team and API key ids, "" when the call was not authenticated
// (Cove's own transitions).
func Caller(ctx context.Context) (teamID, apiKeyID string) {
	c, _ := ctx.Value(callerKey{}).(caller)
	return c.team, c.apiKey
}
