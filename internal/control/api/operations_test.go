package api_test

import (
	"net/http"
	"strings"
	"testing"
)

func TestUnservedE2BOperations(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, method, path string
		status             int
		message            string
	}{
		{name: "an E2B operation no route claims answers 501 naming it", method: "PUT", path: "/sandboxes/i123/network",
			status: http.StatusNotImplemented, message: "PUT /sandboxes/{sandboxID}/network is not implemented by this Cove server"},
		{name: "a literal segment wins over a wildcard", method: "GET", path: "/templates/aliases/py",
			status: http.StatusNotImplemented, message: "GET /templates/aliases/{alias} is not implemented by this Cove server"},
		{name: "the same path under another method is still its own operation", method: "DELETE", path: "/templates/tags",
			status: http.StatusNotImplemented, message: "DELETE /templates/tags is not implemented by this Cove server"},
		{name: "a path E2B does not have is no such route", method: "GET", path: "/no/such/thing",
			status: http.StatusNotFound, message: "no such route: GET /no/such/thing"},
		{name: "a method E2B does not have on a known path is no such route", method: "PATCH", path: "/volumes/v1",
			status: http.StatusNotFound, message: "no such route"},
		{name: "an operation with a real route is served by it", method: "GET", path: "/sandboxes/inope",
			status: http.StatusNotFound, message: "inope"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, "")
			res := e.do(t, tt.method, tt.path, "", "X-E2B-Request-Id", "req-op-1")
			if res.status != tt.status {
				t.Fatalf("status %d, want %d; body %s", res.status, tt.status, res.body)
			}
			body := res.json(t)
			msg, _ := body["message"].(string)
			if !strings.HasPrefix(msg, tt.message) && !strings.Contains(msg, tt.message) {
				t.Fatalf("message %q, want it to start with %q", msg, tt.message)
			}
			if !strings.Contains(msg, "(request id req-op-1)") {
				t.Fatalf("message %q does not carry the request id", msg)
			}
			if code, _ := body["code"].(float64); int(code) != tt.status {
				t.Fatalf("code %v, want %d", body["code"], tt.status)
			}
		})
	}
}
