package telemetry

// OpenTelemetry: traces and logs exported over OTLP/HTTP when an endpoint is set, nothing at
// all when it is not.
//
// The one idea: a trace starts at Cove's edge. A traceparent an outside client sends is never
// the parent of Cove's spans (TraceHTTP starts a new root and only links to it); the only
// traceparent Cove honours is the one its proxy puts on the hop to envd (ContinueTraceHTTP),
// and the proxy removes any a client sent before adding its own.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"runtime/debug"
	"strings"
	"sync/atomic"

	"go.opentelemetry.io/contrib/bridges/otelslog"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlplog/otlploghttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	sdklog "go.opentelemetry.io/otel/sdk/log"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// Span attribute and log keys of tracing.
const (
	AttrRequestID         = "cove.request_id"         // the request id, on every server span
	AttrClientTraceparent = "cove.client_traceparent" // what an outside client sent, never its parent
	KeyTraceID            = "trace_id"
	KeySpanID             = "span_id"
)

// OTelConfig configures SetupOTel.
type OTelConfig struct {
	// Endpoint is the OTLP/HTTP collector's base URL (http://127.0.0.1:4318): traces go to
	// /v1/traces and logs to /v1/logs under it. "" turns OpenTelemetry off at no cost.
	Endpoint string
	// ServiceName is the resource's service.name ("cove-server", "cove-envd").
	ServiceName string
	// Version is service.version; the binary's module version when "".
	Version string
	// Headers are sent with every export (an API key of a hosted collector). The standard
	// OTEL_EXPORTER_OTLP_HEADERS are honoured as well.
	Headers map[string]string
	// Insecure sends to an Endpoint given without a scheme over plain HTTP.
	Insecure bool
}

// otelState is what SetupOTel installed; nil while OpenTelemetry is off.
type otelState struct {
	tp     *sdktrace.TracerProvider
	logs   slog.Handler // the otelslog bridge every Cove logger fans out to
	tracer trace.Tracer
}

var otelCur atomic.Pointer[otelState]

// traceContext is the only propagator Cove speaks: W3C traceparent and tracestate. Baggage
// from outside is not taken.
var traceContext = propagation.TraceContext{}

// SetupOTel starts exporting traces and logs to cfg.Endpoint over OTLP/HTTP: a tracer
// provider with a batch span processor and a W3C trace-context propagator, and a logger
// provider that every logger NewLogger made (before or after this call) also sends its
// records to. shutdown flushes what is buffered and stops the exporters. With no Endpoint
// nothing is started and shutdown does nothing.
func SetupOTel(ctx context.Context, cfg OTelConfig) (shutdown func(context.Context) error, err error) {
	if cfg.Endpoint == "" {
		return func(context.Context) error { return nil }, nil
	}
	base, err := endpointURL(cfg.Endpoint, cfg.Insecure)
	if err != nil {
		return nil, err
	}
	if cfg.ServiceName == "" {
		cfg.ServiceName = "cove"
	}
	if cfg.Version == "" {
		cfg.Version = moduleVersion()
	}
	res, err := resource.New(ctx,
		resource.WithTelemetrySDK(),
		resource.WithAttributes(attribute.String("service.name", cfg.ServiceName), attribute.String("service.version", cfg.Version)),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override
	)
	if err != nil && res == nil {
		return nil, fmt.Errorf("otel resource: %w", err)
	}

	spans, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(base+"/v1/traces"), otlptracehttp.WithHeaders(cfg.Headers))
	if err != nil {
		return nil, fmt.Errorf("otlp trace exporter: %w", err)
	}
	records, err := otlploghttp.New(ctx, otlploghttp.WithEndpointURL(base+"/v1/logs"), otlploghttp.WithHeaders(cfg.Headers))
	if err != nil {
		_ = spans.Shutdown(ctx)
		return nil, fmt.Errorf("otlp log exporter: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(spans), sdktrace.WithResource(res))
	lp := sdklog.NewLoggerProvider(sdklog.WithProcessor(sdklog.NewBatchProcessor(records)), sdklog.WithResource(res))

	otel.SetErrorHandler(exportErrors{})
	otel.SetTextMapPropagator(traceContext)
	otel.SetTracerProvider(tp)
	otelCur.Store(&otelState{
		tp:     tp,
		logs:   otelslog.NewHandler("github.com/cove-dev/cove", otelslog.WithLoggerProvider(lp), otelslog.WithVersion(cfg.Version)),
		tracer: tp.Tracer("github.com/cove-dev/cove"),
	})
	return func(ctx context.Context) error {
		otelCur.Store(nil)
		otel.SetTracerProvider(tracenoop.NewTracerProvider())
		return errors.Join(tp.Shutdown(ctx), lp.Shutdown(ctx))
	}, nil
}

// endpointURL returns the collector's base URL without a trailing slash.
func endpointURL(endpoint string, insecure bool) (string, error) {
	if !strings.Contains(endpoint, "://") {
		scheme := "https://"
		if insecure {
			scheme = "http://"
		}
		endpoint = scheme + endpoint
	}
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return "", fmt.Errorf("otel endpoint %q: want an OTLP/HTTP base URL such as http://127.0.0.1:4318", endpoint)
	}
	return strings.TrimRight(u.String(), "/"), nil
}

func moduleVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

// OTelEnabled reports whether SetupOTel is exporting.
func OTelEnabled() bool { return otelCur.Load() != nil }

// TracerProvider returns the exporting tracer provider, or a no-op one while OTel is off.
func TracerProvider() trace.TracerProvider {
	if st := otelCur.Load(); st != nil {
		return st.tp
	}
	return tracenoop.NewTracerProvider()
}

// TraceHTTP wraps an edge handler (the API and the proxy, which outside clients call) in a
// server span. A traceparent the client sent does not parent the span: the span starts a new
// trace, linked to the client's and noting it as cove.client_traceparent, so no client can
// put its ids into Cove's traces. Call it inside httpx.RequestIDs so the span gets
// cove.request_id. With OTel off it returns next itself.
func TraceHTTP(next http.Handler) http.Handler {
	st := otelCur.Load()
	if st == nil {
		return next
	}
	return otelhttp.NewHandler(tagSpan(next, true), "cove",
		otelhttp.WithTracerProvider(st.tp),
		otelhttp.WithMeterProvider(metricnoop.NewMeterProvider()), // metrics are Prometheus's
		otelhttp.WithPropagators(traceContext),
		otelhttp.WithPublicEndpointFn(func(*http.Request) bool { return true }),
	)
}

// ContinueTraceHTTP honours the traceparent a request carries: for envd, which only Cove's
// proxy reaches. With OTel on, requests that skip does not exclude get a server span that
// continues the caller's trace; the others (RPCs, whose spans otelconnect makes) and every
// request while OTel is off just carry the caller's span context, so their log lines still
// get its trace_id.
func ContinueTraceHTTP(next http.Handler, skip func(*http.Request) bool) http.Handler {
	carry := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Traceparent") == "" {
			next.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r.WithContext(ContinueTrace(r.Context(), r.Header)))
	})
	st := otelCur.Load()
	if st == nil {
		return carry
	}
	spans := otelhttp.NewHandler(tagSpan(next, false), "envd",
		otelhttp.WithTracerProvider(st.tp),
		otelhttp.WithMeterProvider(metricnoop.NewMeterProvider()),
		otelhttp.WithPropagators(traceContext),
	)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if skip != nil && skip(r) {
			carry.ServeHTTP(w, r)
			return
		}
		spans.ServeHTTP(w, r)
	})
}

// tagSpan puts the request id (and, at an edge, the client's own traceparent) on the span.
func tagSpan(next http.Handler, edge bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		SpanRequestID(r.Context())
		if tp := r.Header.Get("Traceparent"); edge && tp != "" {
			trace.SpanFromContext(r.Context()).SetAttributes(attribute.String(AttrClientTraceparent, truncate(tp, 128)))
		}
		next.ServeHTTP(w, r)
	})
}

// SpanRequestID records the context's request id on its span as cove.request_id.
func SpanRequestID(ctx context.Context) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	id := RequestID(ctx)
	if id != "" {
		span.SetAttributes(attribute.String(AttrRequestID, id))
	}
}

// ContinueTrace returns ctx carrying the remote span context of h's traceparent. Only for
// headers Cove's own hop wrote.
func ContinueTrace(ctx context.Context, h http.Header) context.Context {
	return traceContext.Extract(ctx, propagation.HeaderCarrier(h))
}

// InjectTrace replaces h's traceparent and tracestate with ctx's span context, or removes
// them when ctx has none: what goes to the next hop is Cove's, never the client's.
func InjectTrace(ctx context.Context, h http.Header) {
	h.Del("Traceparent")
	h.Del("Tracestate")
	traceContext.Inject(ctx, propagation.HeaderCarrier(h))
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// exportErrors reports the SDK's own errors (an unreachable collector) as JSON lines on
// stderr, at most one a minute, and never through the OTLP log bridge, which would loop.
type exportErrors struct{}

var exportErrorLog = slog.New(slog.NewJSONHandler(os.Stderr, nil))

func (exportErrors) Handle(err error) {
	Warnings.Warn(context.Background(), exportErrorLog, "", "otel export", KeyError, err.Error())
}
