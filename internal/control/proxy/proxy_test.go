package proxy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/control/orchestrator"
	"github.com/cove-dev/cove/internal/control/proxy"
	"github.com/cove-dev/cove/internal/guest/envd/files"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/sdk/reason"
)

// The backend below stands in for the orchestrator's sandbox bookkeeping only: every
// connection it hands out is a real TCP connection to a real HTTP server on loopback, so
// the proxying itself (headers, streaming, cutting) is tested for real.

const domain = "cove.test"

type fakeBackend struct {
	mu      sync.Mutex
	sbs     map[string]*store.Sandbox
	ports   map[string]string // "id:port" → upstream address
	watched map[string]map[*io.Closer]struct{}
	// private holds the traffic tokens of sandboxes whose ports are private, masks their
	// Host headers to send, by id.
	private, masks map[string]string
}

func newBackend() *fakeBackend {
	return &fakeBackend{sbs: map[string]*store.Sandbox{}, ports: map[string]string{}, watched: map[string]map[*io.Closer]struct{}{},
		private: map[string]string{}, masks: map[string]string{}}
}

func (b *fakeBackend) TrafficToken(id string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.private[id]
}

func (b *fakeBackend) PortOptions(id string) (string, []int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.masks[id], nil
}

// serve starts an upstream for port of sandbox sb.
func (b *fakeBackend) serve(t *testing.T, sb *store.Sandbox, port int, h http.Handler) {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	b.mu.Lock()
	defer b.mu.Unlock()
	if sb.State == "" {
		sb.State = store.StateRunning
	}
	b.sbs[sb.ID] = sb
	b.ports[fmt.Sprintf("%s:%d", sb.ID, port)] = srv.Listener.Addr().String()
}

func (b *fakeBackend) Lookup(_ context.Context, id string) (*store.Sandbox, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	sb, ok := b.sbs[id]
	if !ok {
		return nil, orchestrator.ErrNotFound
	}
	if sb.State == store.StateKilled {
		return nil, &orchestrator.GoneError{ID: id, Reason: sb.KillReason, At: *sb.KilledAt}
	}
	cp := *sb
	return &cp, nil
}

func (b *fakeBackend) DialPort(ctx context.Context, id string, port int) (net.Conn, error) {
	if _, err := b.Lookup(ctx, id); err != nil {
		return nil, err
	}
	b.mu.Lock()
	sb := b.sbs[id]
	if sb.State == store.StatePaused {
		if !sb.AutoResume {
			b.mu.Unlock()
			return nil, &orchestrator.PausedError{ID: id}
		}
		sb.State = store.StateRunning
	}
	addr, ok := b.ports[fmt.Sprintf("%s:%d", id, port)]
	b.mu.Unlock()
	if !ok {
		addr = "127.0.0.1:1" // nothing listens: a real "connection refused"
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

func (b *fakeBackend) Watch(id string, c io.Closer) func() {
	b.mu.Lock()
	defer b.mu.Unlock()
	key := &c
	if b.watched[id] == nil {
		b.watched[id] = map[*io.Closer]struct{}{}
	}
	b.watched[id][key] = struct{}{}
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		delete(b.watched[id], key)
	}
}

func (b *fakeBackend) SecureSandboxes(context.Context) []*store.Sandbox {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []*store.Sandbox
	for _, sb := range b.sbs {
		if sb.Secure && sb.State != store.StateKilled {
			cp := *sb
			out = append(out, &cp)
		}
	}
	return out
}

func (b *fakeBackend) Authorized(_ context.Context, id, token string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	sb, ok := b.sbs[id]
	return ok && (!sb.Secure || sb.EnvdAccessToken == token)
}

// kill marks the sandbox killed and closes its watched connections, as the orchestrator does.
func (b *fakeBackend) kill(id string, why reason.KillReason) {
	b.mu.Lock()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	b.sbs[id].State, b.sbs[id].KillReason, b.sbs[id].KilledAt = store.StateKilled, why, &at
	conns := b.watched[id]
	b.watched[id] = nil
	b.mu.Unlock()
	for c := range conns {
		(*c).Close()
	}
}

func (b *fakeBackend) watchedCount(id string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.watched[id])
}

// echo answers with what it received, as JSON, and sets its own request id header (which
// the proxy must not duplicate).
func echo(label string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("X-E2B-Request-Id", r.Header.Get("X-E2B-Request-Id"))
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]string{
			"label":      label,
			"method":     r.Method,
			"uri":        r.URL.RequestURI(),
			"host":       r.Host,
			"request_id": r.Header.Get("X-E2B-Request-Id"),
			"token":      r.Header.Get("X-Access-Token"),
			"api_key":    r.Header.Get("X-API-Key") + r.Header.Get("E2b-Traffic-Access-Token"),
			"user_auth":  r.Header.Get("Authorization"),
			"upgrade":    r.Header.Get("X-Hop"),
			"forwarded":  r.Header.Get("X-Forwarded-For"),
			"body":       string(body),
		})
	})
}

type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) lines(msg string) []map[string]any {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(b.buf.String()), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// await returns the lines with msg once there are at least n of them, or what there is after
// five seconds: the proxy writes its access line after the handler returns, which can be just
// after the client has read the whole response.
func (b *logBuffer) await(msg string, n int) []map[string]any {
	deadline := time.Now().Add(5 * time.Second)
	for {
		lines := b.lines(msg)
		if len(lines) >= n || time.Now().After(deadline) {
			return lines
		}
		time.Sleep(5 * time.Millisecond)
	}
}

type env struct {
	backend *fakeBackend
	proxy   *proxy.Proxy
	url     string
	logs    *logBuffer
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{backend: newBackend(), logs: &logBuffer{}}
	e.proxy = proxy.New(proxy.Config{Backend: e.backend, Domain: domain,
		Logger: slog.New(slog.NewJSONHandler(e.logs, nil))})
	srv := httptest.NewServer(e.proxy)
	t.Cleanup(srv.Close)
	t.Cleanup(e.proxy.Close)
	e.url = srv.URL
	return e
}

// get sends a request through the proxy; header pairs "Host" set the Host.
func (e *env) request(t *testing.T, method, path string, body io.Reader, header ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, e.url+path, body)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] == "Host" {
			req.Host = header[i+1]
		} else {
			req.Header.Set(header[i], header[i+1])
		}
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { res.Body.Close() })
	return res
}

func decode(t *testing.T, res *http.Response) map[string]any {
	t.Helper()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("status %d body %q is not JSON: %v", res.StatusCode, b, err)
	}
	return m
}

func TestMatch(t *testing.T) {
	t.Parallel()
	p := proxy.New(proxy.Config{Backend: newBackend(), Domain: domain})
	noDomain := proxy.New(proxy.Config{Backend: newBackend()})
	tests := []struct {
		name   string
		p      *proxy.Proxy
		target string
		host   string
		header string
		want   bool
	}{
		{name: "the sandbox id header matches", p: p, target: "/process.Process/Start", header: "isb1", want: true},
		{name: "a {port}-{id}.{domain} Host matches", p: p, target: "/health", host: "49983-isb1.cove.test", want: true},
		{name: "such a Host with a listen port matches", p: p, target: "/health", host: "8080-isb1.cove.test:3000", want: true},
		{name: "a Host in another domain does not match", p: p, target: "/health", host: "49983-isb1.other.test"},
		{name: "a Host without a port prefix does not match", p: p, target: "/health", host: "isb1.cove.test"},
		{name: "a Host nested deeper does not match", p: p, target: "/health", host: "49983-isb1.x.cove.test"},
		{name: "Host routing is off without a domain", p: noDomain, target: "/health", host: "49983-isb1.cove.test"},
		{name: "a signed /files URL matches", p: p, target: "/files?path=%2Fa&signature=v1_x", want: true},
		{name: "an unsigned /files URL does not match", p: p, target: "/files?path=%2Fa"},
		{name: "a REST path does not match", p: p, target: "/v2/sandboxes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest("GET", tt.target, nil)
			r.Host = tt.host
			if tt.header != "" {
				r.Header.Set(proxy.HeaderSandboxID, tt.header)
			}
			if got := tt.p.Match(r); got != tt.want {
				t.Errorf("Match = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestRouting(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sb := &store.Sandbox{ID: "isb1"}
	e.backend.serve(t, sb, proxy.EnvdPort, echo("envd"))
	e.backend.serve(t, sb, 49999, echo("jupyter"))
	e.backend.serve(t, &store.Sandbox{ID: "isb2"}, proxy.EnvdPort, echo("envd of isb2"))
	tests := []struct {
		name   string
		header []string
		label  string
	}{
		{name: "the id header alone goes to envd's port", header: []string{"E2b-Sandbox-Id", "isb1"}, label: "envd"},
		{name: "the port header picks the port", header: []string{"E2b-Sandbox-Id", "isb1", "E2b-Sandbox-Port", "49999"}, label: "jupyter"},
		{name: "the id header picks the sandbox", header: []string{"E2b-Sandbox-Id", "isb2"}, label: "envd of isb2"},
		{name: "the Host picks sandbox and port", header: []string{"Host", "49999-isb1.cove.test"}, label: "jupyter"},
		{name: "the Host with a listen port still routes", header: []string{"Host", "49983-isb2.cove.test:8443"}, label: "envd of isb2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := e.request(t, "POST", "/process.Process/List?x=1", strings.NewReader(`{"a":1}`), tt.header...)
			if res.StatusCode != 200 {
				t.Fatalf("status %d", res.StatusCode)
			}
			got := decode(t, res)
			if got["label"] != tt.label || got["uri"] != "/process.Process/List?x=1" || got["body"] != `{"a":1}` || got["method"] != "POST" {
				t.Errorf("upstream saw %v", got)
			}
		})
	}
	t.Run("the client's Host and headers reach the upstream, hop-by-hop ones do not", func(t *testing.T) {
		t.Parallel()
		res := e.request(t, "GET", "/x", nil, "Host", "49983-isb1.cove.test", "X-Access-Token", "tok",
			"Connection", "X-Hop", "X-Hop", "dropped")
		got := decode(t, res)
		if got["host"] != "49983-isb1.cove.test" || got["token"] != "tok" || got["upgrade"] != "" || got["forwarded"] == "" {
			t.Errorf("upstream saw %v", got)
		}
	})
	t.Run("Cove's credentials do not reach a user's port; the user's own Authorization does", func(t *testing.T) {
		t.Parallel()
		res := e.request(t, "GET", "/x", nil, "Host", "49999-isb1.cove.test", "X-Access-Token", "tok",
			"X-API-Key", "cove-key", "E2b-Traffic-Access-Token", "traffic", "Authorization", "Bearer users-own")
		got := decode(t, res)
		if got["label"] != "jupyter" || got["token"] != "" || got["api_key"] != "" || got["user_auth"] != "Bearer users-own" {
			t.Errorf("upstream saw %v", got)
		}
	})
	t.Run("the request id goes upstream and is echoed once", func(t *testing.T) {
		t.Parallel()
		res := e.request(t, "GET", "/x", nil, "E2b-Sandbox-Id", "isb1", "X-E2B-Request-Id", "rid-42")
		got := decode(t, res)
		if got["request_id"] != "rid-42" {
			t.Errorf("upstream saw request id %v", got["request_id"])
		}
		if ids := res.Header.Values("X-E2B-Request-Id"); len(ids) != 1 || ids[0] != "rid-42" {
			t.Errorf("echoed %v", ids)
		}
	})
	t.Run("a minted request id goes upstream and is echoed", func(t *testing.T) {
		t.Parallel()
		res := e.request(t, "GET", "/x", nil, "E2b-Sandbox-Id", "isb1")
		got := decode(t, res)
		if id := res.Header.Get("X-E2B-Request-Id"); id == "" || got["request_id"] != id {
			t.Errorf("echoed %q, upstream saw %v", id, got["request_id"])
		}
	})
	t.Run("a bad port header is a 400 JSON body", func(t *testing.T) {
		t.Parallel()
		res := e.request(t, "GET", "/x", nil, "E2b-Sandbox-Id", "isb1", "E2b-Sandbox-Port", "70000")
		body := decode(t, res)
		if res.StatusCode != 400 || body["code"] != 400.0 {
			t.Errorf("status %d body %v", res.StatusCode, body)
		}
	})
	t.Run("every proxied request logs one line", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.backend.serve(t, &store.Sandbox{ID: "ilog"}, 8080, echo("app"))
		res := e.request(t, "GET", "/y", nil, "E2b-Sandbox-Id", "ilog", "E2b-Sandbox-Port", "8080", "X-E2B-Request-Id", "rid-log")
		io.Copy(io.Discard, res.Body)
		lines := e.logs.await("proxy request", 1)
		if len(lines) != 1 {
			t.Fatalf("%d lines", len(lines))
		}
		want := map[string]any{"sandbox.id": "ilog", "sandbox.port": 8080.0, "http.response.status_code": 200.0, "request_id": "rid-log"}
		for k, v := range want {
			if lines[0][k] != v {
				t.Errorf("%s = %v, want %v (%v)", k, lines[0][k], v, lines[0])
			}
		}
	})
}

// streamer writes one chunk per value received on next, flushing each, until next closes.
func streamer(next <-chan string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/connect+json")
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		for {
			select {
			case s, ok := <-next:
				if !ok {
					return
				}
				io.WriteString(w, s)
				w.(http.Flusher).Flush()
			case <-r.Context().Done():
				return
			}
		}
	})
}

// readChunk reads what arrives next, failing after a second.
func readChunk(t *testing.T, r io.Reader) (string, error) {
	t.Helper()
	type result struct {
		s   string
		err error
	}
	ch := make(chan result, 1)
	go func() {
		buf := make([]byte, 1024)
		n, err := r.Read(buf)
		ch <- result{string(buf[:n]), err}
	}()
	select {
	case res := <-ch:
		return res.s, res.err
	case <-time.After(2 * time.Second):
		t.Fatal("nothing arrived within 2 s")
		return "", nil
	}
}

func TestStreaming(t *testing.T) {
	t.Parallel()
	t.Run("a slow stream arrives chunk by chunk", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		next := make(chan string)
		e.backend.serve(t, &store.Sandbox{ID: "istream"}, proxy.EnvdPort, streamer(next))
		res := e.request(t, "POST", "/process.Process/Start", strings.NewReader("{}"), "E2b-Sandbox-Id", "istream")
		if res.StatusCode != 200 || res.Header.Get("Content-Type") != "application/connect+json" {
			t.Fatalf("status %d headers %v", res.StatusCode, res.Header)
		}
		for _, frame := range []string{"start", "data-1", "data-2", "end"} {
			next <- frame
			got, err := readChunk(t, res.Body)
			if got != frame {
				t.Fatalf("read %q (%v), want %q alone", got, err, frame)
			}
		}
		close(next)
		if rest, err := io.ReadAll(res.Body); err != nil || len(rest) != 0 {
			t.Errorf("after the end: %q, %v", rest, err)
		}
	})
	t.Run("killing the sandbox cuts its open stream, then /health is 502", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		next := make(chan string, 1)
		sb := &store.Sandbox{ID: "icut"}
		e.backend.serve(t, sb, proxy.EnvdPort, streamer(next))
		res := e.request(t, "POST", "/process.Process/Start", strings.NewReader("{}"), "E2b-Sandbox-Id", "icut")
		next <- "start"
		if got, _ := readChunk(t, res.Body); got != "start" {
			t.Fatalf("first frame %q", got)
		}
		if n := e.backend.watchedCount("icut"); n != 1 {
			t.Fatalf("%d watched connections, want 1", n)
		}
		e.backend.kill("icut", reason.KillRequest)
		_, err := readChunk(t, res.Body)
		if err == nil || err == io.EOF {
			t.Fatalf("stream ended with %v, want an abrupt cut", err)
		}
		health := e.request(t, "GET", "/health", nil, "E2b-Sandbox-Id", "icut")
		body := decode(t, health)
		if health.StatusCode != 502 || body["state"] != "killed" || body["killReason"] != "request" {
			t.Errorf("health: status %d body %v", health.StatusCode, body)
		}
		// Two lines, the cut stream's and the health request's, in either order.
		lines := e.logs.await("proxy request", 2)
		if !slices.ContainsFunc(lines, func(l map[string]any) bool {
			return strings.Contains(fmt.Sprint(l["error"]), "response cut")
		}) {
			t.Errorf("no line for the cut stream: %v", lines)
		}
	})
}

func TestErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.backend.serve(t, &store.Sandbox{ID: "ipaused", State: store.StatePaused}, proxy.EnvdPort, echo("paused"))
	e.backend.serve(t, &store.Sandbox{ID: "iauto", State: store.StatePaused, AutoResume: true}, proxy.EnvdPort, echo("resumed"))
	e.backend.serve(t, &store.Sandbox{ID: "ikilled"}, proxy.EnvdPort, echo("killed"))
	e.backend.kill("ikilled", reason.KillTimeout)
	e.backend.serve(t, &store.Sandbox{ID: "irunning"}, proxy.EnvdPort, echo("running"))
	tests := []struct {
		name    string
		id      string
		port    string
		path    string
		status  int
		state   string
		reason  string
		gone    bool // E2B's fixed message; Cove's in detail and the reason header
		message string
	}{
		{name: "a paused sandbox without auto-resume is 502 on /health", id: "ipaused", path: "/health",
			status: 502, state: "paused", message: "sandbox ipaused is paused"},
		{name: "a paused sandbox without auto-resume is 502 on any path", id: "ipaused", path: "/filesystem.Filesystem/Stat",
			status: 502, state: "paused", message: "auto-resume is off"},
		{name: "a killed sandbox is E2B's 502 not found, with the kill reason in detail", id: "ikilled", path: "/health",
			status: 502, state: "killed", reason: "timeout", gone: true, message: "sandbox ikilled was killed: timeout at 2026-01-02T03:04:05Z"},
		{name: "an unknown sandbox is E2B's 502 not found", id: "inope", path: "/health",
			status: 502, gone: true, message: "sandbox inope not found"},
		{name: "a closed port is 502 with the cause", id: "irunning", port: "3000", path: "/",
			status: 502, message: "connection refused"},
		{name: "a paused sandbox with auto-resume is resumed and served", id: "iauto", path: "/health", status: 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := []string{"E2b-Sandbox-Id", tt.id, "X-E2B-Request-Id", "rid-" + tt.id + tt.port}
			if tt.port != "" {
				h = append(h, "E2b-Sandbox-Port", tt.port)
			}
			res := e.request(t, "GET", tt.path, nil, h...)
			body := decode(t, res)
			if res.StatusCode != tt.status {
				t.Fatalf("status %d, want %d; body %v", res.StatusCode, tt.status, body)
			}
			if tt.status == 200 {
				return
			}
			msg, _ := body["message"].(string)
			rid := "rid-" + tt.id + tt.port
			if tt.gone {
				if msg != "The sandbox was not found" {
					t.Errorf("message %q, want E2B's exact text", msg)
				}
				msg, _ = body["detail"].(string)
				if h := res.Header.Get(proxy.HeaderReason); h != msg {
					t.Errorf("%s header %q, want the detail %q", proxy.HeaderReason, h, msg)
				}
			}
			if body["code"] != float64(tt.status) || body["sandboxId"] != tt.id || body["requestId"] != rid ||
				!strings.Contains(msg, tt.message) || !strings.Contains(msg, rid) {
				t.Errorf("body %v", body)
			}
			if fmt.Sprint(body["state"]) != fmt.Sprint(orNil(tt.state)) || fmt.Sprint(body["killReason"]) != fmt.Sprint(orNil(tt.reason)) {
				t.Errorf("state %v killReason %v, want %q %q", body["state"], body["killReason"], tt.state, tt.reason)
			}
			if res.Header.Get("Content-Type") != "application/json" {
				t.Errorf("content type %q", res.Header.Get("Content-Type"))
			}
		})
	}
}

func TestCallersWithoutTheTokenLearnNothingOfASecureSandbox(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.backend.serve(t, &store.Sandbox{ID: "iskilled", Secure: true, EnvdAccessToken: "tok-k"}, proxy.EnvdPort, echo("k"))
	e.backend.kill("iskilled", reason.KillTimeout)
	e.backend.serve(t, &store.Sandbox{ID: "ispaused", Secure: true, EnvdAccessToken: "tok-p", State: store.StatePaused}, proxy.EnvdPort, echo("p"))
	e.backend.serve(t, &store.Sandbox{ID: "isrun", Secure: true, EnvdAccessToken: "tok-r"}, proxy.EnvdPort, echo("r"))
	tests := []struct {
		name, id, port, token string
		rpc                   bool
		want                  string // in the message
		state                 any
		owner                 bool // shows the sandbox's token: may learn more
	}{
		{name: "a killed one without a token is not found or not yours", id: "iskilled", want: "sandbox iskilled not found or not yours"},
		{name: "a killed one with another token is not found or not yours", id: "iskilled", token: "tok-r", want: "sandbox iskilled not found or not yours"},
		{name: "a paused one without a token is not found or not yours", id: "ispaused", want: "sandbox ispaused not found or not yours"},
		{name: "a closed port without a token is not found or not yours", id: "isrun", port: "3000", want: "sandbox isrun not found or not yours"},
		{name: "an unknown one gets the very same answer", id: "inever", want: "sandbox inever not found or not yours"},
		{name: "an RPC without a token gets a Connect not_found saying only that", id: "iskilled", rpc: true, want: "sandbox iskilled not found or not yours"},
		{name: "the owner with the token learns the kill reason", id: "iskilled", token: "tok-k", want: "was killed: timeout", state: "killed"},
		{name: "the owner's RPC learns the kill reason", id: "iskilled", token: "tok-k", rpc: true, want: "was killed: timeout"},
		{name: "the owner with the token learns it is paused", id: "ispaused", token: "tok-p", want: "is paused", state: "paused"},
		{name: "the owner with the token learns why a port of theirs is closed", id: "isrun", port: "3000", token: "tok-r", want: "connection refused", owner: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := []string{"E2b-Sandbox-Id", tt.id}
			if tt.port != "" {
				h = append(h, "E2b-Sandbox-Port", tt.port)
			}
			if tt.token != "" {
				h = append(h, proxy.HeaderAccessToken, tt.token)
			}
			method, path, body := "GET", "/health", io.Reader(nil)
			if tt.rpc {
				method, path, body = "POST", "/filesystem.Filesystem/Stat", strings.NewReader("{}")
				h = append(h, "Content-Type", "application/json")
			}
			res := e.request(t, method, path, body, h...)
			got := decode(t, res)
			msg, _ := got["message"].(string)
			if detail, ok := got["detail"].(string); ok && !tt.rpc {
				if msg != "The sandbox was not found" {
					t.Errorf("message %q, want E2B's exact text beside the detail", msg)
				}
				msg = detail
			}
			if !strings.Contains(msg, tt.want) {
				t.Errorf("message %q, want %q", msg, tt.want)
			}
			if tt.rpc {
				if res.StatusCode != 404 || got["code"] != "not_found" {
					t.Errorf("RPC: status %d body %v, want a Connect not_found", res.StatusCode, got)
				}
				return
			}
			if res.StatusCode != 502 || got["state"] != tt.state {
				t.Errorf("status %d body %v, want 502 with state %v", res.StatusCode, got, tt.state)
			}
			if tt.state == nil && !tt.owner && (got["killReason"] != nil || got["port"] != nil || strings.Contains(msg, "refused")) {
				t.Errorf("an unauthenticated answer tells more: %v", got)
			}
		})
	}
}

func orNil(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func TestSignedFiles(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for i, tok := range []string{"tok-a", "tok-b", "tok-c"} {
		e.backend.serve(t, &store.Sandbox{ID: fmt.Sprintf("isec%d", i), Secure: true, EnvdAccessToken: tok},
			proxy.EnvdPort, echo(fmt.Sprintf("isec%d", i)))
	}
	e.backend.serve(t, &store.Sandbox{ID: "iplain"}, proxy.EnvdPort, echo("iplain"))
	signed := func(path, op, user, token, exp string) string {
		q := url.Values{"path": {path}, "signature": {proxy.Sign(path, op, user, token, exp)}}
		if user != "" {
			q.Set("username", user)
		}
		if exp != "" {
			q.Set("signature_expiration", exp)
		}
		return "/files?" + q.Encode()
	}
	tests := []struct {
		name   string
		method string
		target string
		status int
		label  string
	}{
		{name: "a read signature picks the sandbox whose token made it", method: "GET",
			target: signed("/home/user/a b.txt", "read", "user", "tok-b", ""), status: 200, label: "isec1"},
		{name: "a write signature with an expiration picks its sandbox", method: "POST",
			target: signed("/tmp/x", "write", "root", "tok-c", "1900000000"), status: 200, label: "isec2"},
		{name: "a signature without a user routes", method: "GET",
			target: signed("/a", "read", "", "tok-a", ""), status: 200, label: "isec0"},
		{name: "a read signature used for a write is 404", method: "POST",
			target: signed("/tmp/x", "read", "user", "tok-a", ""), status: 404},
		{name: "a signature of an unknown token is 404", method: "GET",
			target: signed("/tmp/x", "read", "user", "tok-zzz", ""), status: 404},
		{name: "a tampered path is 404", method: "GET",
			target: strings.Replace(signed("/tmp/x", "read", "user", "tok-a", ""), "x", "y", 1), status: 404},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := e.request(t, tt.method, tt.target, strings.NewReader("data"), "X-E2B-Request-Id", "rid-files")
			body := decode(t, res)
			if res.StatusCode != tt.status {
				t.Fatalf("status %d, want %d; body %v", res.StatusCode, tt.status, body)
			}
			if tt.status == 200 {
				if body["label"] != tt.label || body["uri"] != tt.target {
					t.Errorf("upstream %v, want %s with the URL untouched", body, tt.label)
				}
				return
			}
			if body["code"] != 404.0 || !strings.Contains(body["message"].(string), "rid-files") {
				t.Errorf("body %v", body)
			}
		})
	}
}

func TestSignMatchesEnvd(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, path, op, user, token string
		exp                         int64
	}{
		{name: "without expiration", path: "/home/user/f", op: "read", user: "user", token: "t1"},
		{name: "with expiration", path: "/x y", op: "write", user: "root", token: "t2", exp: 1900000000},
		{name: "without user", path: "/x", op: "read", token: "t3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			exp := ""
			if tt.exp != 0 {
				exp = fmt.Sprint(tt.exp)
			}
			if got, want := proxy.Sign(tt.path, tt.op, tt.user, tt.token, exp), files.Sign(tt.path, tt.op, tt.user, tt.token, tt.exp); got != want {
				t.Errorf("proxy signs %q, envd expects %q", got, want)
			}
		})
	}
}

// frame is a Connect envelope.
func frame(flags byte, payload string) string {
	return string([]byte{flags, 0, 0, byte(len(payload) >> 8), byte(len(payload))}) + payload
}

func TestStreamEndsWithTheKill(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		contentType string
		first       string // what upstream sends before the kill
		want        func(t *testing.T, rest []byte)
	}{
		{"a Connect stream ends with an end-stream frame the SDK reads as terminated, carrying the kill", "application/connect+json", frame(0, `{"event":{}}`),
			func(t *testing.T, rest []byte) {
				if len(rest) < 5 || rest[0] != 0x02 || int(rest[3])<<8|int(rest[4]) != len(rest)-5 {
					t.Fatalf("after the kill: %q, want one end-stream frame", rest)
				}
				var end struct {
					Error struct{ Code, Message string }
				}
				if err := json.Unmarshal(rest[5:], &end); err != nil {
					t.Fatal(err)
				}
				if end.Error.Code != "unknown" || !strings.Contains(end.Error.Message, "sandbox iend was killed: timeout at 2026-01-02T03:04:05Z") ||
					!strings.Contains(end.Error.Message, "terminated") ||
					!strings.Contains(end.Error.Message, "(request id rid-end)") {
					t.Errorf("end frame error %+v", end.Error)
				}
			}},
		{"a gRPC-Web stream ends with a trailer frame carrying the kill", "application/grpc-web+proto", frame(0, "data"),
			func(t *testing.T, rest []byte) {
				if len(rest) < 5 || rest[0] != 0x80 || !strings.Contains(string(rest[5:]), "grpc-status: 2") ||
					!strings.Contains(string(rest[5:]), "was killed: timeout") {
					t.Fatalf("after the kill: %q, want a trailer frame with grpc-status 2 (unknown)", rest)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			runStreamKill(t, tt.contentType, tt.first, func(t *testing.T, _ *http.Response, rest []byte) { tt.want(t, rest) })
		})
	}
	t.Run("a gRPC stream ends with grpc-status trailers carrying the kill", func(t *testing.T) {
		t.Parallel()
		runStreamKill(t, "application/grpc", frame(0, "data"), func(t *testing.T, res *http.Response, rest []byte) {
			if len(rest) != 0 || res.Trailer.Get("Grpc-Status") != "2" || !strings.Contains(res.Trailer.Get("Grpc-Message"), "was killed: timeout") {
				t.Fatalf("after the kill: body %q trailers %v, want grpc-status 2 (unknown) trailers", rest, res.Trailer)
			}
		})
	})
	t.Run("a stream cut inside a frame is aborted, not given a broken frame", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		next := make(chan string, 1)
		e.backend.serve(t, &store.Sandbox{ID: "ihalf"}, proxy.EnvdPort, typedStreamer("application/connect+json", next))
		res := e.request(t, "POST", "/process.Process/Start", strings.NewReader("{}"),
			"E2b-Sandbox-Id", "ihalf", "Content-Type", "application/connect+json")
		half := frame(0, `{"event":{}}`)[:8]
		next <- half
		got := make([]byte, len(half))
		if _, err := io.ReadFull(res.Body, got); err != nil {
			t.Fatal(err)
		}
		e.backend.kill("ihalf", reason.KillRequest)
		if rest, err := io.ReadAll(res.Body); err == nil {
			t.Errorf("read %q and a clean end; want an abort", rest)
		}
	})
}

// runStreamKill opens a stream of contentType through the proxy, lets first through, kills
// the sandbox, and hands what follows to want; the stream must end, not be aborted.
func runStreamKill(t *testing.T, contentType, first string, want func(t *testing.T, res *http.Response, rest []byte)) {
	t.Helper()
	e := newEnv(t)
	next := make(chan string, 1)
	e.backend.serve(t, &store.Sandbox{ID: "iend"}, proxy.EnvdPort, typedStreamer(contentType, next))
	res := e.request(t, "POST", "/process.Process/Start", strings.NewReader("{}"),
		"E2b-Sandbox-Id", "iend", "Content-Type", contentType, "X-E2B-Request-Id", "rid-end")
	next <- first
	got := make([]byte, len(first))
	if _, err := io.ReadFull(res.Body, got); err != nil || string(got) != first {
		t.Fatalf("first frame %q, %v", got, err)
	}
	e.backend.kill("iend", reason.KillTimeout)
	done := make(chan []byte, 1)
	go func() {
		rest, err := io.ReadAll(res.Body)
		if err != nil {
			t.Errorf("the stream was aborted (%v) instead of ending with the error", err)
		}
		done <- rest
	}()
	select {
	case rest := <-done:
		want(t, res, rest)
	case <-time.After(5 * time.Second):
		t.Fatal("the stream did not end after the kill")
	}
	lines := e.logs.await("proxy request", 1)
	if len(lines) != 1 || !strings.Contains(fmt.Sprint(lines[0]["error"]), "was killed") {
		t.Errorf("access line %v, want the kill as its error", lines)
	}
}

// typedStreamer is streamer with a response content type.
func typedStreamer(contentType string, next <-chan string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", contentType)
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		for {
			select {
			case s := <-next:
				io.WriteString(w, s)
				w.(http.Flusher).Flush()
			case <-r.Context().Done():
				return
			}
		}
	})
}
