package envd

import (
	"context"
	"net/http"

	"connectrpc.com/connect"
	"connectrpc.com/otelconnect"
	metricnoop "go.opentelemetry.io/otel/metric/noop"

	"github.com/cove-dev/cove/internal/observe/telemetry"
)

// traced continues the trace of Cove's proxy, the only way into envd: every request's
// context carries the traceparent it was sent with, so its log lines get the trace_id; with
// OTel exporting, plain HTTP requests get a server span here and RPCs one from
// traceInterceptors.
func traced(next http.Handler) http.Handler {
	return telemetry.ContinueTraceHTTP(next, func(r *http.Request) bool {
		return isRPC(r.URL.Path) || r.URL.Path == "/health"
	})
}

// traceInterceptors returns, while OTel exports, otelconnect's interceptor (trusting the
// proxy's traceparent) and one that puts the request id on its span; none otherwise.
func traceInterceptors() []connect.Interceptor {
	if !telemetry.OTelEnabled() {
		return nil
	}
	otel, err := otelconnect.NewInterceptor(
		otelconnect.WithTracerProvider(telemetry.TracerProvider()),
		otelconnect.WithMeterProvider(metricnoop.NewMeterProvider()), // envd's metrics are /metrics
		otelconnect.WithTrustRemote(),
	)
	if err != nil {
		return nil
	}
	return []connect.Interceptor{otel, spanRequestID{}}
}

// spanRequestID records the request id on the RPC's span.
type spanRequestID struct{}

func (spanRequestID) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		telemetry.SpanRequestID(ctx)
		return next(ctx, req)
	}
}

func (spanRequestID) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (spanRequestID) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		telemetry.SpanRequestID(ctx)
		return next(ctx, conn)
	}
}
