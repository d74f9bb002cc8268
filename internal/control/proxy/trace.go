package proxy

import (
	"net/http/httputil"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/cove-dev/cove/internal/observe/telemetry"
)

// traceHop names the sandbox on the request's span and, for envd, hands the trace on: envd
// honours the traceparent it receives, so the one it gets must be Cove's (the span of this
// request), never one the client sent. A user's own server on another port gets the
// client's headers untouched: Cove is a plain proxy there.
func traceHop(pr *httputil.ProxyRequest, t target) {
	ctx := pr.In.Context()
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetName("proxy " + pr.In.Method)
		span.SetAttributes(attribute.String(telemetry.KeySandboxID, t.id), attribute.Int(telemetry.KeySandboxPort, t.port))
	}
	if t.port == EnvdPort {
		telemetry.InjectTrace(ctx, pr.Out.Header)
	}
}
