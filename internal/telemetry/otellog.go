package telemetry

import (
	"context"
	"log/slog"
	"sync/atomic"

	"go.opentelemetry.io/otel/trace"
)

// logHandler is the handler of every logger NewLogger makes. It writes JSON lines, adding
// trace_id and span_id when the record's context has a span, and, while SetupOTel exports,
// also hands each record to the OTLP log bridge (which takes the span from the context
// itself). While OTel is off the fan-out costs one atomic load per line.
type logHandler struct {
	json slog.Handler
	// ops are the WithAttrs and WithGroup calls since the root, replayed on the bridge,
	// which may have been installed after they were made.
	ops    []logOp
	bridge atomic.Pointer[derivedBridge]
}

type logOp struct {
	group string
	attrs []slog.Attr
}

// derivedBridge is the bridge with this handler's ops applied, for one SetupOTel.
type derivedBridge struct {
	st *otelState
	h  slog.Handler
}

func newLogHandler(json slog.Handler) *logHandler { return &logHandler{json: json} }

func (h *logHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.json.Enabled(ctx, level)
}

func (h *logHandler) Handle(ctx context.Context, r slog.Record) error {
	if st := otelCur.Load(); st != nil {
		_ = h.bridgeFor(st).Handle(ctx, r)
	}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r = r.Clone()
		r.AddAttrs(slog.String(KeyTraceID, sc.TraceID().String()), slog.String(KeySpanID, sc.SpanID().String()))
	}
	return h.json.Handle(ctx, r)
}

func (h *logHandler) bridgeFor(st *otelState) slog.Handler {
	if d := h.bridge.Load(); d != nil && d.st == st {
		return d.h
	}
	b := st.logs
	for _, op := range h.ops {
		if op.group != "" {
			b = b.WithGroup(op.group)
		} else {
			b = b.WithAttrs(op.attrs)
		}
	}
	h.bridge.Store(&derivedBridge{st: st, h: b})
	return b
}

func (h *logHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	if len(attrs) == 0 {
		return h
	}
	return h.with(logOp{attrs: attrs}, h.json.WithAttrs(attrs))
}

func (h *logHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	return h.with(logOp{group: name}, h.json.WithGroup(name))
}

func (h *logHandler) with(op logOp, json slog.Handler) *logHandler {
	ops := make([]logOp, len(h.ops), len(h.ops)+1)
	copy(ops, h.ops)
	return &logHandler{json: json, ops: append(ops, op)}
}
