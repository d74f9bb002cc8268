// Package otlptest is a fake OpenTelemetry collector for tests: an OTLP/HTTP receiver that
// keeps the spans and log records it is sent. A collector is a boundary Cove does not own.
package otlptest

import (
	"compress/gzip"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"

	collogs "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Span is one exported span, flattened for assertions.
type Span struct {
	Service      string
	Name         string
	TraceID      string
	SpanID       string
	ParentSpanID string // "" for a root
	Attrs        map[string]string
	Links        []string // trace ids of the linked spans
}

// Record is one exported log record, flattened for assertions.
type Record struct {
	Service string
	Body    string
	TraceID string
	SpanID  string
	Attrs   map[string]string
}

// Collector is the receiver. URL is its OTLP/HTTP base URL.
type Collector struct {
	URL string

	mu       sync.Mutex
	requests int
	spans    []Span
	records  []Record
}

// Start starts a collector, closed at cleanup.
func Start(t testing.TB) *Collector {
	c := &Collector{}
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	c.URL = srv.URL
	return c
}

// ServeHTTP takes POST /v1/traces and /v1/logs in protobuf.
func (c *Collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	c.requests++
	c.mu.Unlock()
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var res proto.Message
	switch r.URL.Path {
	case "/v1/traces":
		var req coltrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		c.addSpans(req.GetResourceSpans())
		res = &coltrace.ExportTraceServiceResponse{}
	case "/v1/logs":
		var req collogs.ExportLogsServiceRequest
		if err := proto.Unmarshal(b, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		c.addRecords(req.GetResourceLogs())
		res = &collogs.ExportLogsServiceResponse{}
	default:
		http.NotFound(w, r)
		return
	}
	out, _ := proto.Marshal(res)
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func (c *Collector) addSpans(rss []*tracepb.ResourceSpans) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range rss {
		service := attrs(rs.GetResource().GetAttributes())["service.name"]
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				sp := Span{Service: service, Name: s.GetName(), TraceID: hexID(s.GetTraceId()),
					SpanID: hexID(s.GetSpanId()), ParentSpanID: hexID(s.GetParentSpanId()), Attrs: attrs(s.GetAttributes())}
				for _, l := range s.GetLinks() {
					sp.Links = append(sp.Links, hexID(l.GetTraceId()))
				}
				c.spans = append(c.spans, sp)
			}
		}
	}
}

func (c *Collector) addRecords(rls []*logspb.ResourceLogs) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rl := range rls {
		service := attrs(rl.GetResource().GetAttributes())["service.name"]
		for _, sl := range rl.GetScopeLogs() {
			for _, l := range sl.GetLogRecords() {
				c.records = append(c.records, Record{Service: service, Body: l.GetBody().GetStringValue(),
					TraceID: hexID(l.GetTraceId()), SpanID: hexID(l.GetSpanId()), Attrs: attrs(l.GetAttributes())})
			}
		}
	}
}

// Requests is how many export requests arrived.
func (c *Collector) Requests() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.requests
}

// Spans returns the spans received so far.
func (c *Collector) Spans() []Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Span(nil), c.spans...)
}

// Records returns the log records received so far.
func (c *Collector) Records() []Record {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Record(nil), c.records...)
}

func hexID(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return hex.EncodeToString(b)
}

// attrs flattens attributes to strings (ints and bools in their text form).
func attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		m[kv.GetKey()] = value(kv.GetValue())
	}
	return m
}

func value(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	case *commonpb.AnyValue_BoolValue:
		if x.BoolValue {
			return "true"
		}
		return "false"
	default:
		return v.String()
	}
}
