package envd_test

import (
	"context"
	"net/http"
	"testing"

	"connectrpc.com/connect"

	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/observe/telemetry/otlptest"
	pb "github.com/cove-dev/cove/sdk/gen/process"
)

// The traceparent Cove's proxy would send on the hop to envd.
const (
	hopTrace       = "4bf92f3577b34da6a3ce929d0e0e4736"
	hopSpan        = "00f067aa0ba902b7"
	hopTraceparent = "00-" + hopTrace + "-" + hopSpan + "-01"
)

func listWithTraceparent(t *testing.T, h *harness, requestID string) {
	t.Helper()
	req := connect.NewRequest(&pb.ListRequest{})
	withHeaders(req, requestID, "")
	req.Header().Set("Traceparent", hopTraceparent)
	if _, err := h.client().List(context.Background(), req); err != nil {
		t.Fatal(err)
	}
}

func TestEnvdContinuesTheProxysTrace(t *testing.T) {
	c := otlptest.Start(t)
	shutdown, err := telemetry.SetupOTel(context.Background(), telemetry.OTelConfig{Endpoint: c.URL, ServiceName: "cove-envd"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = shutdown(context.Background()) })
	h := start(t)

	listWithTraceparent(t, h, "req-envd-trace-1")
	req, _ := http.NewRequest(http.MethodGet, h.url+"/envs", nil)
	req.Header.Set(telemetry.HeaderRequestID, "req-envd-trace-2")
	req.Header.Set("Traceparent", hopTraceparent)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}

	spans := map[string]otlptest.Span{}
	for _, s := range c.Spans() {
		spans[s.Attrs[telemetry.AttrRequestID]] = s
	}
	for _, tc := range []struct{ name, requestID, msg string }{
		{"an RPC's span is a child of the proxy's and its rpc line carries the trace", "req-envd-trace-1", "rpc"},
		{"a plain HTTP request's span is a child of the proxy's and its line carries the trace", "req-envd-trace-2", "http request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, ok := spans[tc.requestID]
			if !ok {
				t.Fatalf("no span with %s in %+v", tc.requestID, c.Spans())
			}
			if s.TraceID != hopTrace || s.ParentSpanID != hopSpan || s.Service != "cove-envd" {
				t.Errorf("span %+v: want a child of %s", s, hopTraceparent)
			}
			line := h.logs.waitLine(t, map[string]any{"msg": tc.msg, telemetry.KeyRequestID: tc.requestID})
			if line[telemetry.KeyTraceID] != hopTrace || line[telemetry.KeySpanID] != s.SpanID {
				t.Errorf("line %v: want trace_id %s span_id %s", line, hopTrace, s.SpanID)
			}
		})
	}
	t.Run("envd's log records reach the collector", func(t *testing.T) {
		for _, r := range c.Records() {
			if r.Body == "rpc" && r.Attrs[telemetry.KeyRequestID] == "req-envd-trace-1" {
				if r.TraceID != hopTrace || r.Service != "cove-envd" {
					t.Errorf("record %+v", r)
				}
				return
			}
		}
		t.Errorf("no rpc record in %+v", c.Records())
	})
}

func TestEnvdLogsTheHopsTraceWithOTelOff(t *testing.T) {
	t.Parallel()
	h := start(t)
	listWithTraceparent(t, h, "req-envd-trace-off")
	line := h.logs.waitLine(t, map[string]any{"msg": "rpc", telemetry.KeyRequestID: "req-envd-trace-off"})
	if line[telemetry.KeyTraceID] != hopTrace || line[telemetry.KeySpanID] != hopSpan {
		t.Errorf("line %v: want the hop's trace_id and span_id", line)
	}
}
