package proxy

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/control/orchestrator"
	"github.com/cove-dev/cove/sdk/reason"
)

func TestRPCErrorsSpeakTheCallersProtocol(t *testing.T) {
	gone := &orchestrator.GoneError{ID: "isb1", Reason: reason.KillTimeout, At: time.Unix(0, 0)}
	msg := "sandbox isb1 was killed: timeout (request id r1)"
	tests := []struct {
		name, path, contentType string
		check                   func(t *testing.T, res *httptest.ResponseRecorder)
	}{
		{"a Connect unary call gets a JSON error and 404", "/filesystem.Filesystem/ListDir", "application/json",
			func(t *testing.T, res *httptest.ResponseRecorder) {
				var e connectError
				if res.Code != http.StatusNotFound || json.Unmarshal(res.Body.Bytes(), &e) != nil || e.Code != "not_found" || e.Message != msg {
					t.Fatalf("%d %q", res.Code, res.Body)
				}
			}},
		{"a Connect stream gets 200 and an end-stream frame with the error", "/process.Process/Start", "application/connect+json",
			func(t *testing.T, res *httptest.ResponseRecorder) {
				b := res.Body.Bytes()
				if res.Code != http.StatusOK || len(b) < 5 || b[0] != 0x02 || int(binary.BigEndian.Uint32(b[1:5])) != len(b)-5 {
					t.Fatalf("%d %q", res.Code, b)
				}
				var end struct{ Error connectError }
				if json.Unmarshal(b[5:], &end) != nil || end.Error.Code != "not_found" || end.Error.Message != msg {
					t.Fatalf("end frame %q", b[5:])
				}
			}},
		{"a gRPC call gets grpc-status 5 and the message", "/process.Process/Start", "application/grpc",
			func(t *testing.T, res *httptest.ResponseRecorder) {
				if res.Code != http.StatusOK || res.Header().Get("Grpc-Status") != "5" || !strings.Contains(res.Header().Get("Grpc-Message"), "was killed: timeout") {
					t.Fatalf("%d %v", res.Code, res.Header())
				}
			}},
		{"a gRPC-Web call gets a trailer frame", "/process.Process/List", "application/grpc-web+proto",
			func(t *testing.T, res *httptest.ResponseRecorder) {
				b := res.Body.Bytes()
				if res.Code != http.StatusOK || len(b) < 5 || b[0] != 0x80 || !strings.Contains(string(b[5:]), "grpc-status: 5") {
					t.Fatalf("%d %q", res.Code, b)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, tt.path, nil)
			r.Header.Set("Content-Type", tt.contentType)
			proto := rpcProtocolOf(r)
			if proto == notRPC {
				t.Fatalf("%s %s is not read as an RPC", tt.path, tt.contentType)
			}
			res := httptest.NewRecorder()
			writeRPCError(res, proto, fmt.Errorf("route: %w", gone), http.StatusBadGateway, msg)
			tt.check(t, res)
		})
	}
	for _, r := range []*http.Request{
		httptest.NewRequest(http.MethodGet, "/health", nil),
		httptest.NewRequest(http.MethodPost, "/files?path=/x", nil),
		httptest.NewRequest(http.MethodPost, "/api/v1/items", strings.NewReader("{}")),
	} {
		r.Header.Set("Content-Type", "application/json")
		if rpcProtocolOf(r) != notRPC {
			t.Errorf("%s %s is read as an RPC: it keeps the JSON 502 /health and user ports rely on", r.Method, r.URL)
		}
	}
}
