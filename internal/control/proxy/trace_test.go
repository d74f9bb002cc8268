package proxy_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cove-dev/cove/internal/control/proxy"
	"github.com/cove-dev/cove/internal/httpx"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/observe/telemetry/otlptest"
	"github.com/cove-dev/cove/internal/store"
)

const clientTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// traceEcho answers with the traceparent it received.
func traceEcho(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Got-Traceparent", r.Header.Get("Traceparent"))
	w.Header().Set("X-Got-Tracestate", r.Header.Get("Tracestate"))
}

// tracedEnv is the proxy composed as `cove server` composes it: request ids, then a span.
func tracedEnv(t *testing.T) *env {
	t.Helper()
	e := &env{backend: newBackend(), logs: &logBuffer{}}
	e.proxy = proxy.New(proxy.Config{Backend: e.backend, Domain: domain, Logger: slog.New(slog.NewJSONHandler(e.logs, nil))})
	srv := httptest.NewServer(httpx.RequestIDs(nil, telemetry.TraceHTTP(e.proxy)))
	t.Cleanup(srv.Close)
	t.Cleanup(e.proxy.Close)
	e.url = srv.URL
	sb := &store.Sandbox{ID: "itrace"}
	e.backend.serve(t, sb, proxy.EnvdPort, http.HandlerFunc(traceEcho))
	e.backend.serve(t, sb, 8080, http.HandlerFunc(traceEcho))
	return e
}

func TestTraceparentToEnvd(t *testing.T) {
	c := otlptest.Start(t)
	shutdown, err := telemetry.SetupOTel(context.Background(), telemetry.OTelConfig{Endpoint: c.URL, ServiceName: "cove-server"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = shutdown(context.Background()) })
	e := tracedEnv(t)

	res := e.request(t, "POST", "/process.Process/List", strings.NewReader("{}"),
		"E2b-Sandbox-Id", "itrace", "Traceparent", clientTraceparent, "Tracestate", "client=1", "X-E2B-Request-Id", "req-hop-1")
	got := res.Header.Get("X-Got-Traceparent")
	user := e.request(t, "GET", "/", nil, "E2b-Sandbox-Id", "itrace", "E2b-Sandbox-Port", "8080", "Traceparent", clientTraceparent)
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}

	var span *otlptest.Span
	for _, s := range c.Spans() {
		if s.Attrs[telemetry.AttrRequestID] == "req-hop-1" {
			span = &s
		}
	}
	if span == nil {
		t.Fatalf("no span with the request id in %+v", c.Spans())
	}
	t.Run("envd gets the traceparent of Cove's span, not the client's", func(t *testing.T) {
		want := "00-" + span.TraceID + "-" + span.SpanID + "-01"
		if got != want {
			t.Errorf("envd got traceparent %q, want Cove's %q (client sent %q)", got, want, clientTraceparent)
		}
		if ts := res.Header.Get("X-Got-Tracestate"); ts != "" {
			t.Errorf("the client's tracestate reached envd: %q", ts)
		}
	})
	t.Run("the span names the sandbox", func(t *testing.T) {
		if span.Attrs[telemetry.KeySandboxID] != "itrace" || span.Attrs["sandbox.port"] != "49983" || span.Name != "proxy POST" {
			t.Errorf("span %+v", span)
		}
	})
	t.Run("a user's own port gets the client's headers untouched", func(t *testing.T) {
		if got := user.Header.Get("X-Got-Traceparent"); got != clientTraceparent {
			t.Errorf("port 8080 got %q", got)
		}
	})
}

func TestNoTraceparentToEnvdWithOTelOff(t *testing.T) {
	t.Parallel()
	e := tracedEnv(t)
	res := e.request(t, "GET", "/health", nil, "E2b-Sandbox-Id", "itrace", "Traceparent", clientTraceparent)
	if got := res.Header.Get("X-Got-Traceparent"); got != "" {
		t.Errorf("envd got the client's traceparent %q", got)
	}
}
