package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// TestProxyErrorKeepsConnection checks that a proxied request with a body that the proxy
// refuses (its sandbox is gone) gets its error, and that the client's keep-alive connection
// then still serves the next request: SDKs reuse connections.
func TestProxyErrorKeepsConnection(t *testing.T) {
	need(t)

	sb := create(t, nil)
	mustCall(t, http.MethodDelete, "/sandboxes/"+sb.ID, nil, http.StatusNoContent, nil)

	u, err := url.Parse(server.URL)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(conn)

	body := `{}`
	fmt.Fprintf(conn, "POST /process.Process/List HTTP/1.1\r\nHost: %s\r\nE2b-Sandbox-Id: %s\r\nE2b-Sandbox-Port: 49983\r\n"+
		"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", u.Host, sb.ID, len(body), body)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("read the proxy's answer: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	t.Run("an RPC with a body to a killed sandbox answers a Connect not_found saying it was killed", func(t *testing.T) {
		if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(b), `"code":"not_found"`) || !strings.Contains(string(b), "was killed") {
			t.Errorf("status %d body %s, want a Connect not_found error saying the sandbox was killed", resp.StatusCode, b)
		}
	})
	t.Run("the same connection then serves the next request", func(t *testing.T) {
		fmt.Fprintf(conn, "GET /sandboxes/%s HTTP/1.1\r\nHost: %s\r\nX-API-Key: %s\r\n\r\n", sb.ID, u.Host, server.APIKey)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			// With full duplex on, a failed dial left the body half-read and net/http
			// panicked on the connection's reuse (golang/go#68560).
			t.Fatalf("the server dropped the keep-alive connection after a proxy error: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET /sandboxes/%s on the reused connection: %d, want 404", sb.ID, resp.StatusCode)
		}
	})
}
