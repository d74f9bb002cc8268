package httpx_test

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/httpx"
)

// TestAStreamAnsweredBeforeTheBodyEndsArrivesWhole: an upstream that answers as soon as it
// has read the first line of a chunked body (a Connect stream does: one message, then the
// answer) must reach the client whole through a proxy that serves it with ServeProxied, while
// the client is still to send its body's end.
func TestAStreamAnsweredBeforeTheBodyEndsArrivesWhole(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		line, err := bufio.NewReader(r.Body).ReadString('\n')
		if err != nil {
			t.Errorf("upstream read: %v", err)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "got "+line)
		http.NewResponseController(w).Flush()
		_, _ = io.WriteString(w, "and the end\n")
	}))
	defer upstream.Close()
	target, _ := url.Parse(upstream.URL)
	rp := &httputil.ReverseProxy{
		Rewrite:       func(pr *httputil.ProxyRequest) { pr.SetURL(target) },
		FlushInterval: -1,
		ErrorLog:      nil,
	}
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		httpx.ServeProxied(rp, w, r)
	}))
	defer front.Close()

	for i := range 20 {
		pr, pw := io.Pipe()
		go func() {
			_, _ = io.WriteString(pw, "first\n")
			time.Sleep(30 * time.Millisecond) // the body's end comes after the answer
			_, _ = io.WriteString(pw, "rest of the body\n")
			_ = pw.Close()
		}()
		req, _ := http.NewRequest(http.MethodPost, front.URL, pr)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("try %d: %v", i, err)
		}
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil || string(body) != "got first\nand the end\n" {
			t.Fatalf("try %d: the answer arrived as %q (%v)", i, body, err)
		}
	}
}
