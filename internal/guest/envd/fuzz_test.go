package envd_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cove-dev/cove/internal/guest/envd"
	"github.com/cove-dev/cove/internal/observe/telemetry"
)

// fuzzProcedures are the RPCs fuzzed with arbitrary bodies. Start is left out on purpose: a
// fuzzer that stumbled on a valid StartRequest would run arbitrary commands on the host.
var fuzzProcedures = []string{
	"/process.Process/Connect", "/process.Process/List", "/process.Process/SendInput",
	"/process.Process/StreamInput", "/process.Process/SendSignal", "/process.Process/Update",
	"/process.Process/CloseStdin", "/filesystem.Filesystem/Stat", "/filesystem.Filesystem/ListDir",
	"/filesystem.Filesystem/GetWatcherEvents",
}

var fuzzContentTypes = []string{
	"application/connect+json", "application/connect+proto", "application/json", "application/proto",
	"application/grpc", "application/grpc-web+proto", "text/plain", "",
}

// FuzzConnectEnvelope feeds arbitrary bytes to envd's RPC endpoints: the envelope reader,
// the codecs and the handlers must answer with an error that names a code and the request
// id, never panic, and never answer 5xx for a client's malformed input.
func FuzzConnectEnvelope(f *testing.F) {
	f.Add(uint8(0), uint8(0), []byte("\x00\x00\x00\x00\x02{}"))
	f.Add(uint8(1), uint8(1), []byte("\x00\x00\x00\x00\x05\x0a\x03\x08\x01\x02"))
	f.Add(uint8(2), uint8(2), []byte(`{"process":{"pid":1}}`))
	f.Add(uint8(3), uint8(0), []byte("\x00\xff\xff\xff\xff"))
	f.Add(uint8(4), uint8(4), []byte("\x00\x00\x00\x00\x10abc"))
	f.Add(uint8(5), uint8(3), []byte("\x0a\x02\x08\x01"))
	f.Add(uint8(6), uint8(5), []byte("\x01\x00\x00\x00\x03abc"))
	srv := envd.New(envd.Config{Logger: telemetry.NewLogger(&bytes.Buffer{}, nil), MaxMessageBytes: 1 << 16})
	h := srv.Handler()
	f.Fuzz(func(t *testing.T, proc, ctype uint8, body []byte) {
		path := fuzzProcedures[int(proc)%len(fuzzProcedures)]
		ct := fuzzContentTypes[int(ctype)%len(fuzzContentTypes)]
		req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
		if ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		if strings.HasPrefix(ct, "application/grpc") {
			req.ProtoMajor, req.ProtoMinor = 2, 0
		}
		req.Header.Set(telemetry.HeaderRequestID, "fuzz-1")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Header().Get(telemetry.HeaderRequestID) != "fuzz-1" {
			t.Fatalf("%s %s: request id not echoed", path, ct)
		}
		switch {
		case rec.Code == http.StatusUnsupportedMediaType:
			// An unknown content type: connect-go answers with Accept-Post.
		case rec.Code >= 500 && rec.Code != http.StatusNotImplemented:
			t.Fatalf("%s %s: status %d for client input: %s", path, ct, rec.Code, rec.Body.Bytes())
		case rec.Code >= 400 && strings.Contains(rec.Header().Get("Content-Type"), "json"):
			var e struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Code == "" || !strings.Contains(e.Message, "fuzz-1") {
				t.Fatalf("%s %s: error body %q lacks a code or the request id", path, ct, rec.Body.Bytes())
			}
		}
	})
}
