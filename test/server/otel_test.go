package server

import (
	"context"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/cove-dev/cove/internal/covetest"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/observe/telemetry/otlptest"
	pb "github.com/cove-dev/cove/sdk/gen/process"
	"github.com/cove-dev/cove/sdk/gen/process/processconnect"
)

// TestOpenTelemetry runs `cove server` with COVE_OTEL_ENDPOINT at a fake collector: spans
// start at Cove's edge whatever traceparent a client sends, name the request id and the
// sandbox, and the server's log lines reach the collector.
func TestOpenTelemetry(t *testing.T) {
	covetest.Skip(t)
	c := otlptest.Start(t)
	t.Setenv("COVE_OTEL_ENDPOINT", c.URL)
	s := covetest.Start(t, "")
	a := client{t: t, url: s.URL, key: s.Key}
	const clientTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	traceparent := "00-" + clientTrace + "-00f067aa0ba902b7-01"

	id := a.create(nil)
	if code, _, _ := a.do(http.MethodGet, "/sandboxes/"+id, nil, "X-E2B-Request-Id", "req-otel-api", "Traceparent", traceparent); code != http.StatusOK {
		t.Fatalf("get sandbox: %d", code)
	}
	req := connect.NewRequest(&pb.ListRequest{})
	req.Header().Set("E2b-Sandbox-Id", id)
	req.Header().Set("X-E2B-Request-Id", "req-otel-proxy")
	req.Header().Set("Traceparent", traceparent)
	if _, err := processconnect.NewProcessClient(http.DefaultClient, s.URL).List(context.Background(), req); err != nil {
		t.Fatal(err)
	}

	// The batch processors export every few seconds.
	spans := map[string]otlptest.Span{}
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		for _, sp := range c.Spans() {
			if rid := sp.Attrs[telemetry.AttrRequestID]; rid != "" {
				spans[rid] = sp
			}
		}
		_, api := spans["req-otel-api"]
		_, px := spans["req-otel-proxy"]
		if api && px && hasRecord(c, "req-otel-proxy") {
			break
		}
	}
	for _, rid := range []string{"req-otel-api", "req-otel-proxy"} {
		sp, ok := spans[rid]
		if !ok {
			t.Errorf("no span with %s among %d spans", rid, len(c.Spans()))
			continue
		}
		if sp.Service != "cove-server" || sp.TraceID == clientTrace || sp.ParentSpanID != "" {
			t.Errorf("span %+v: want a cove-server root outside the client's trace", sp)
		}
	}
	if sp := spans["req-otel-proxy"]; sp.Attrs[telemetry.KeySandboxID] != id {
		t.Errorf("proxy span %+v does not name sandbox %s", sp, id)
	}
	if !hasRecord(c, "req-otel-proxy") {
		t.Errorf("no cove-server log record with request id req-otel-proxy among %d", len(c.Records()))
	}
}

func hasRecord(c *otlptest.Collector, requestID string) bool {
	for _, r := range c.Records() {
		if r.Service == "cove-server" && r.Attrs[telemetry.KeyRequestID] == requestID {
			return true
		}
	}
	return false
}
