package telemetry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/httpx"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/observe/telemetry/otlptest"
)

// A traceparent an outside client might send.
const (
	clientTrace       = "4bf92f3577b34da6a3ce929d0e0e4736"
	clientSpan        = "00f067aa0ba902b7"
	clientTraceparent = "00-" + clientTrace + "-" + clientSpan + "-01"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// line returns the first JSON line whose msg is msg.
func (s *syncBuffer) line(t *testing.T, msg string) map[string]any {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range strings.Split(s.b.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == msg {
			return m
		}
	}
	t.Fatalf("no %q line in %s", msg, s.b.String())
	return nil
}

// setup starts OTel exporting to a fake collector until the test ends; flush exports
// everything buffered and stops it.
func setup(t *testing.T, service string) (c *otlptest.Collector, flush func()) {
	t.Helper()
	c = otlptest.Start(t)
	shutdown, err := telemetry.SetupOTel(context.Background(), telemetry.OTelConfig{Endpoint: c.URL, ServiceName: service})
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	flush = func() {
		once.Do(func() {
			if err := shutdown(context.Background()); err != nil {
				t.Errorf("shutdown: %v", err)
			}
		})
	}
	t.Cleanup(flush)
	return c, flush
}

// edge is the server's composition: request ids, then a span, then a handler that logs.
func edge(logs *syncBuffer, next http.Handler) http.Handler {
	l := telemetry.NewLogger(logs, slog.LevelInfo)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r = r.WithContext(telemetry.WithLogger(r.Context(), l))
		httpx.RequestIDs(nil, telemetry.TraceHTTP(next)).ServeHTTP(w, r)
	})
}

func logHandler(msg string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := telemetry.With(r.Context(), telemetry.KeySandboxID, "sb1")
		telemetry.Logger(ctx).InfoContext(ctx, msg)
		w.WriteHeader(http.StatusNoContent)
	})
}

func TestEdgeSpans(t *testing.T) {
	c, flush := setup(t, "cove-server")
	logs := &syncBuffer{}
	srv := httptest.NewServer(edge(logs, logHandler("handled")))
	t.Cleanup(srv.Close)

	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/sandboxes", nil)
	req.Header.Set(telemetry.HeaderRequestID, "req-otel-1")
	req.Header.Set("Traceparent", clientTraceparent)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	flush()

	var span otlptest.Span
	for _, s := range c.Spans() {
		if s.Attrs[telemetry.AttrRequestID] == "req-otel-1" {
			span = s
		}
	}
	t.Run("an API request makes a server span with cove.request_id", func(t *testing.T) {
		if span.SpanID == "" || span.Service != "cove-server" {
			t.Fatalf("no span of service cove-server with the request id in %+v", c.Spans())
		}
	})
	t.Run("a client's traceparent is not the parent, only a link", func(t *testing.T) {
		if span.TraceID == clientTrace || span.ParentSpanID != "" {
			t.Errorf("span %+v continues the client's trace", span)
		}
		if len(span.Links) != 1 || span.Links[0] != clientTrace || span.Attrs[telemetry.AttrClientTraceparent] != clientTraceparent {
			t.Errorf("span %+v does not note the client's traceparent", span)
		}
	})
	t.Run("log lines carry the span's trace_id and span_id", func(t *testing.T) {
		line := logs.line(t, "handled")
		if line[telemetry.KeyTraceID] != span.TraceID || line[telemetry.KeySpanID] != span.SpanID || line[telemetry.KeyRequestID] != "req-otel-1" {
			t.Errorf("line %v, span %+v", line, span)
		}
	})
	t.Run("log records reach the collector with their attributes and span", func(t *testing.T) {
		for _, r := range c.Records() {
			if r.Body == "handled" {
				if r.TraceID != span.TraceID || r.Attrs[telemetry.KeyRequestID] != "req-otel-1" || r.Attrs[telemetry.KeySandboxID] != "sb1" || r.Service != "cove-server" {
					t.Errorf("record %+v, span %+v", r, span)
				}
				return
			}
		}
		t.Errorf("no \"handled\" record in %+v", c.Records())
	})
}

func TestContinueTrace(t *testing.T) {
	send := func(t *testing.T, h http.Handler, path string) {
		t.Helper()
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.Header.Set("Traceparent", clientTraceparent)
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	t.Run("with OTel on, a hop's traceparent parents envd's span", func(t *testing.T) {
		c, flush := setup(t, "cove-envd")
		logs := &syncBuffer{}
		l := telemetry.NewLogger(logs, slog.LevelInfo)
		next := logHandler("continued")
		handler := telemetry.ContinueTraceHTTP(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			next.ServeHTTP(w, r.WithContext(telemetry.WithLogger(r.Context(), l)))
		}), nil)
		send(t, handler, "/files")
		flush()
		spans := c.Spans()
		if len(spans) != 1 || spans[0].TraceID != clientTrace || spans[0].ParentSpanID != clientSpan || spans[0].Service != "cove-envd" {
			t.Fatalf("spans %+v: want one child of %s", spans, clientTraceparent)
		}
		if line := logs.line(t, "continued"); line[telemetry.KeyTraceID] != clientTrace || line[telemetry.KeySpanID] != spans[0].SpanID {
			t.Errorf("line %v", line)
		}
	})
	t.Run("with OTel off, log lines still carry the hop's trace_id", func(t *testing.T) {
		logs := &syncBuffer{}
		l := telemetry.NewLogger(logs, slog.LevelInfo)
		next := logHandler("carried")
		handler := telemetry.ContinueTraceHTTP(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			next.ServeHTTP(w, r.WithContext(telemetry.WithLogger(r.Context(), l)))
		}), nil)
		send(t, handler, "/files")
		if line := logs.line(t, "carried"); line[telemetry.KeyTraceID] != clientTrace || line[telemetry.KeySpanID] != clientSpan {
			t.Errorf("line %v", line)
		}
	})
}

func TestInjectTraceReplacesTheClients(t *testing.T) {
	h := http.Header{}
	h.Set("Traceparent", clientTraceparent)
	h.Set("Tracestate", "client=1")
	telemetry.InjectTrace(context.Background(), h)
	if h.Get("Traceparent") != "" || h.Get("Tracestate") != "" {
		t.Errorf("a client's trace headers survived without a span: %v", h)
	}
}

func TestOTelOffCostsNothing(t *testing.T) {
	c := otlptest.Start(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", c.URL) // only the flag's default reads it
	before := runtime.NumGoroutine()
	shutdown, err := telemetry.SetupOTel(context.Background(), telemetry.OTelConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if telemetry.OTelEnabled() {
		t.Fatal("OTel is on without an endpoint")
	}
	if after := runtime.NumGoroutine(); after > before {
		t.Errorf("%d goroutines started without an endpoint", after-before)
	}
	next := logHandler("off")
	if probe := (&probeHandler{}); telemetry.TraceHTTP(probe) != http.Handler(probe) {
		t.Error("TraceHTTP wrapped the handler with OTel off")
	}
	logs := &syncBuffer{}
	srv := httptest.NewServer(edge(logs, next))
	t.Cleanup(srv.Close)
	req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
	req.Header.Set("Traceparent", clientTraceparent)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if line := logs.line(t, "off"); line[telemetry.KeyTraceID] != nil {
		t.Errorf("an edge took the client's trace id with OTel off: %v", line)
	}
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if n := c.Requests(); n != 0 {
		t.Errorf("%d requests reached the collector with OTel off", n)
	}
}

type probeHandler struct{}

func (*probeHandler) ServeHTTP(http.ResponseWriter, *http.Request) {}

// BenchmarkLogOTelOff is one log line through Cove's logger with OTel off: the fan-out is
// one atomic load.
func BenchmarkLogOTelOff(b *testing.B) {
	ctx := telemetry.WithRequestID(telemetry.WithLogger(context.Background(), telemetry.NewLogger(discard{}, slog.LevelInfo)), "r1")
	l := telemetry.Logger(ctx)
	b.ReportAllocs()
	for b.Loop() {
		l.InfoContext(ctx, "x", telemetry.KeySandboxID, "sb1")
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// BenchmarkLogPlainJSON is the same line through a bare JSON handler, for comparison.
func BenchmarkLogPlainJSON(b *testing.B) {
	ctx := context.Background()
	l := slog.New(slog.NewJSONHandler(discard{}, nil)).With(telemetry.KeyRequestID, "r1")
	b.ReportAllocs()
	for b.Loop() {
		l.InfoContext(ctx, "x", telemetry.KeySandboxID, "sb1")
	}
}
