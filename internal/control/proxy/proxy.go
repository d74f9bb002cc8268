// Package proxy forwards HTTP traffic to a port inside a sandbox: envd's RPCs and file
// transfers, and whatever the user serves.
//
// The one idea: a request names its sandbox and port (E2b-Sandbox-Id / E2b-Sandbox-Port
// headers, a {port}-{id}.{domain} Host, or a signed /files URL that only the sandbox's
// access token could have made), and is forwarded by httputil.ReverseProxy over a
// connection the backend dials inside the sandbox. Every such connection is registered with
// the backend, which closes it when the sandbox is paused or killed, so open streams end
// with the sandbox. Every failure is a JSON body naming the sandbox and the request id; for a
// sandbox that is gone it is E2B's 502 "The sandbox was not found", Cove's reason (its state,
// kill reason and when) beside it in detail and X-Cove-Reason. A user's port never sees
// Cove's credentials (credentials.go).
//
// It must not import the API, the console or server; it reaches sandboxes through its Backend
// interface.
package proxy

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cove-dev/cove/internal/errdefs"
	"github.com/cove-dev/cove/internal/httpx"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/sdk/envdapi"
)

// Backend is what the proxy needs from the orchestrator. Its lookups span every team: a
// sandbox id (or a valid signature) is the capability.
type Backend interface {
	// Lookup returns a sandbox of any team: orchestrator.ErrNotFound, or
	// *orchestrator.GoneError for a killed one.
	Lookup(ctx context.Context, id string) (*store.Sandbox, error)
	// DialPort connects to port inside the sandbox, resuming a paused sandbox that has
	// auto-resume; else *orchestrator.PausedError, *orchestrator.GoneError or
	// orchestrator.ErrNotFound.
	DialPort(ctx context.Context, id string, port int) (net.Conn, error)
	// Watch closes c when the sandbox is paused or killed, until stop is called.
	Watch(id string, c io.Closer) (stop func())
	// SecureSandboxes lists running and paused secure sandboxes with their access tokens.
	SecureSandboxes(ctx context.Context) []*store.Sandbox
	// Authorized says the caller may learn the sandbox's state: it exists (in any state,
	// killed included) and is insecure (its id is the capability) or accessToken is its
	// envd access token.
	Authorized(ctx context.Context, id, accessToken string) bool
	// Every backend says which ports are private and how they are reached: one that could
	// not would let the proxy make a private sandbox's ports public without a word, so these
	// are part of the contract, never discovered at request time.
	TrafficGuard
	PortOptions
}

// HeaderAccessToken carries a secure sandbox's envd access token, as the SDKs send it.
const HeaderAccessToken = "X-Access-Token"

// Headers the SDKs send when one URL serves every sandbox.
const (
	HeaderSandboxID   = "E2b-Sandbox-Id"
	HeaderSandboxPort = "E2b-Sandbox-Port"
)

// EnvdPort is envd's port inside every sandbox, the default target.
const EnvdPort = envdapi.Port

// TrafficGuard is the part of a Backend that keeps some sandboxes' ports private (E2B's
// allowPublicTraffic false): a request to a port other than envd's must carry the
// sandbox's traffic access token.
type TrafficGuard interface {
	// TrafficToken is the token sandbox id's ports require; "" when they are public.
	TrafficToken(id string) string
}

// PortOptions is the part of a Backend that says how to reach a sandbox's ports (E2B's
// httpsPorts and maskRequestHost).
type PortOptions interface {
	// PortOptions is the Host header to send ("" keeps the client's; ${PORT} is the port)
	// and the ports that serve HTTPS (reached without verifying their certificates).
	PortOptions(id string) (maskHost string, httpsPorts []int)
}

// HeaderTrafficToken carries a private sandbox's traffic access token.
const HeaderTrafficToken = "E2b-Traffic-Access-Token"

var errTrafficToken = errdefs.New(errdefs.ErrPermissionDenied, "traffic access token required")

// errAccessToken is envd's answer to a request without a secure sandbox's access token,
// given by the proxy for a paused sandbox, which such a request must not resume.
var errAccessToken = errdefs.New(errdefs.ErrUnauthenticated, "access token required")

// Config is what New needs.
type Config struct {
	Backend Backend
	// Domain is the sandboxes' base domain: Host {port}-{id}.{Domain} routes to that port.
	// "" turns Host routing off.
	Domain string
	// Logger is the base logger; nil uses the one in each request's context.
	Logger *slog.Logger
}

// Proxy forwards requests to sandboxes. It is an http.Handler; Match says which requests
// are its.
type Proxy struct {
	cfg       Config
	edge      http.Handler // serve through the chain
	transport *http.Transport
	rp        *httputil.ReverseProxy

	stopping atomic.Bool // Shutdown was called: streams end naming the server's stop
	mu       sync.Mutex
	conns    map[*watchedConn]struct{} // open upstream connections, for Shutdown
}

// New returns a Proxy over cfg.Backend.
func New(cfg Config) *Proxy {
	p := &Proxy{cfg: cfg, conns: map[*watchedConn]struct{}{}}
	p.transport = &http.Transport{
		DialContext:           p.dial,
		ForceAttemptHTTP2:     false, // envd and user servers speak HTTP/1.1 in the clear
		DisableCompression:    true,  // pass Accept-Encoding and bodies through untouched
		MaxIdleConnsPerHost:   32,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: time.Second,
		// Only a sandbox's httpsPorts are reached over TLS; like E2B, their certificates are
		// not verified, so self-signed ones work.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
	}
	base := cfg.Logger
	if base == nil {
		base = telemetry.Logger(context.Background())
	}
	p.rp = &httputil.ReverseProxy{
		Rewrite:        p.rewrite,
		Transport:      p.transport,
		FlushInterval:  -1, // flush every write: each stream frame reaches the client at once
		ModifyResponse: p.modifyResponse,
		ErrorHandler:   p.upstreamError,
		ErrorLog:       log.New(slogWriter{base}, "", 0),
	}
	p.edge = p.Chain().Then(httpx.AuthSandbox, p.serve)
	return p
}

// Close closes idle upstream connections.
func (p *Proxy) Close() {
	p.transport.CloseIdleConnections()
}

// errStopping is why a request or stream ends while the server stops.
var errStopping = errors.New("the Cove server is stopping (a restart or shutdown): reconnect once it is back")

// Shutdown ends every proxied request at once, before the server stops: open Connect,
// gRPC-Web and gRPC streams end with an unavailable error naming the server's stop (not a
// cut envelope), and no new upstream connection is made. The sandboxes are not touched.
func (p *Proxy) Shutdown() {
	p.stopping.Store(true)
	p.mu.Lock()
	conns := make([]*watchedConn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
	p.transport.CloseIdleConnections()
}

// Match reports whether r is for a sandbox: it carries E2b-Sandbox-Id, its Host is
// {port}-{id}.{domain}, or it is a signed /files URL.
func (p *Proxy) Match(r *http.Request) bool {
	if r.Header.Get(HeaderSandboxID) != "" {
		return true
	}
	if _, ok := p.hostTarget(r.Host); ok {
		return true
	}
	return isSignedFiles(r)
}

// SandboxID is the sandbox r is for, by its E2b-Sandbox-Id header or its Host; false for
// a request that names none that way (a signed /files URL names its sandbox only through
// a signature, which the node holding the sandbox checks).
func (p *Proxy) SandboxID(r *http.Request) (string, bool) {
	if id := r.Header.Get(HeaderSandboxID); id != "" {
		return id, validID(id)
	}
	if t, ok := p.hostTarget(r.Host); ok {
		return t.id, true
	}
	return "", false
}

// target is where a request goes.
type target struct {
	id     string
	port   int
	signed bool // found by a valid signature, which only the access token could make
	// tokens are the sandbox's own secrets (envd access token, traffic token), stripped
	// from a request to a user's port wherever they appear.
	tokens []string
	// accessToken is the caller's X-Access-Token, kept for explaining a failure: the
	// request ReverseProxy hands its error handler has lost it on the way to a user's port.
	accessToken string
}

type targetKey struct{}

// ServeHTTP forwards r to its sandbox, or answers with a JSON error: through the one chain
// (httpx.Chain), where the sandbox's own tokens authenticate.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) { p.edge.ServeHTTP(w, r) }

// Chain is the proxy's edge: the one chain, where a sandbox's own tokens authenticate
// (authenticate), errors are answered in the caller's protocol (failed), and each request
// is counted by its outcome.
func (p *Proxy) Chain() httpx.Chain {
	return httpx.Chain{Edge: "proxy", Logger: p.cfg.Logger, Authenticate: p.authenticate, Fail: p.failed, Done: countRequest}
}

// countRequest counts a proxied request by its status class, or "error".
func countRequest(_ *http.Request, status int, note *httpx.Note) {
	outcome := httpx.StatusClass(status)
	if note.Err != nil {
		outcome = "error"
	}
	telemetry.ProxyRequests.WithLabelValues(outcome).Inc()
}

// targetError is an error found once the request's target (or part of it) is known, which
// the answer describes.
type targetError struct {
	t   target
	err error
}

func (e *targetError) Error() string { return e.err.Error() }
func (e *targetError) Unwrap() error { return e.err }

// failed answers the chain's errors as fail does, with the target when it is known.
func (p *Proxy) failed(w http.ResponseWriter, r *http.Request, err error) {
	var t target
	if te, ok := err.(*targetError); ok {
		t, err = te.t, te.err
	}
	p.fail(w, r, t, err)
}

// authenticate finds r's sandbox and port and checks the sandbox's own tokens: a private
// port's traffic token, and the access token that may resume a paused secure sandbox. envd
// checks its access token itself.
func (p *Proxy) authenticate(r *http.Request, _ httpx.Auth) (context.Context, error) {
	ctx := r.Context()
	t, err := p.route(ctx, r)
	if t.id != "" {
		httpx.NoteFrom(ctx).Add(telemetry.KeySandboxID, t.id, telemetry.KeySandboxPort, t.port)
	}
	if err != nil {
		return nil, &targetError{t, err}
	}
	trafficChecked := false
	if t.port != EnvdPort {
		if want := p.cfg.Backend.TrafficToken(t.id); want != "" {
			if subtle.ConstantTimeCompare([]byte(r.Header.Get(HeaderTrafficToken)), []byte(want)) != 1 {
				return nil, &targetError{t, fmt.Errorf("%w: sandbox %s keeps its ports private: send its trafficAccessToken in the %s header", errTrafficToken, t.id, HeaderTrafficToken)}
			}
			trafficChecked = true
		}
	}
	// A paused secure sandbox is resumed only for a caller who shows its access token (or,
	// on a private port, its traffic token), on envd's port as on the user's.
	if !t.signed && !trafficChecked {
		if err := p.checkResumeToken(ctx, t.id, r.Header.Get(HeaderAccessToken)); err != nil {
			return nil, &targetError{t, err}
		}
	}
	return context.WithValue(ctx, targetKey{}, t), nil
}

// serve forwards an authenticated request to its target.
func (p *Proxy) serve(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	t, _ := ctx.Value(targetKey{}).(target)
	defer func() {
		// A response cut after it began (ReverseProxy's abort): the access line says why.
		if v := recover(); v != nil {
			if note := httpx.NoteFrom(ctx); note.Err == nil {
				note.Err = p.cutReason(ctx, t.id, r)
			}
			panic(v)
		}
	}()
	rec := &streamFlusher{ResponseWriter: w}
	if t.port != EnvdPort {
		t.tokens = p.sandboxTokens(ctx, t.id)
	}
	t.accessToken = r.Header.Get(HeaderAccessToken)
	ctx = telemetry.With(ctx, telemetry.KeySandboxID, t.id, telemetry.KeySandboxPort, t.port)
	ctx = context.WithValue(ctx, targetKey{}, t)
	// Full duplex: the transport may still send the request body's last bytes after envd has
	// answered (the flusher unwraps to w, whose connection it reaches).
	httpx.ServeProxied(p.rp, rec, r.WithContext(ctx))
	return nil
}

// rewrite points the outgoing request at the target; the URL host is a key for the
// connection pool ("{id}:{port}"), decoded again by dial. The client's Host and headers
// stay, hop-by-hop headers are gone (ReverseProxy strips them), and the request id (and, to
// envd, Cove's traceparent) goes upstream.
func (p *Proxy) rewrite(pr *httputil.ProxyRequest) {
	ctx := pr.In.Context()
	t, _ := ctx.Value(targetKey{}).(target)
	pr.Out.URL.Scheme = "http"
	pr.Out.URL.Host = net.JoinHostPort(t.id, strconv.Itoa(t.port))
	pr.SetXForwarded()
	if t.port != EnvdPort {
		mask, https := p.cfg.Backend.PortOptions(t.id)
		if slices.Contains(https, t.port) {
			pr.Out.URL.Scheme = "https"
		}
		if mask != "" {
			pr.Out.Host = strings.ReplaceAll(mask, "${PORT}", strconv.Itoa(t.port))
		}
	}
	if t.port != EnvdPort {
		// Cove's own credentials stop here: a user's server in the sandbox never sees them
		// (envd needs its access token; nothing else does).
		stripCredentials(pr.Out.Header, t.tokens)
	}
	if id := telemetry.RequestID(ctx); id != "" {
		pr.Out.Header.Set(telemetry.HeaderRequestID, id)
	}
	traceHop(pr, t)
}

// modifyResponse drops upstream's request id header (the proxy already echoes the id) and
// makes an RPC stream end with an error frame if its sandbox goes away mid-stream.
func (p *Proxy) modifyResponse(res *http.Response) error {
	res.Header.Del(telemetry.HeaderRequestID)
	p.wrapStream(res)
	return nil
}

// dial connects to "{id}:{port}" inside the sandbox and registers the connection so that
// pausing or killing the sandbox closes it.
func (p *Proxy) dial(ctx context.Context, _, addr string) (net.Conn, error) {
	id, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, err
	}
	if p.stopping.Load() {
		return nil, errStopping
	}
	conn, err := p.cfg.Backend.DialPort(ctx, id, port)
	if err != nil {
		return nil, err
	}
	c := &watchedConn{Conn: conn, stop: p.cfg.Backend.Watch(id, conn), proxy: p}
	p.mu.Lock()
	p.conns[c] = struct{}{}
	p.mu.Unlock()
	if p.stopping.Load() { // Shutdown ran meanwhile and did not see c
		_ = c.Close()
		return nil, errStopping
	}
	return c, nil
}

// watchedConn stops being watched when the transport closes it.
type watchedConn struct {
	net.Conn
	once  sync.Once
	stop  func()
	proxy *Proxy
}

func (c *watchedConn) Close() error {
	c.once.Do(func() {
		if c.stop != nil {
			c.stop()
		}
		c.proxy.mu.Lock()
		delete(c.proxy.conns, c)
		c.proxy.mu.Unlock()
	})
	return c.Conn.Close()
}

// streamFlusher flushes the headers of a response without a Content-Length (a stream) at
// once, so the client sees them before the first frame. (The chain's recorder keeps the
// status for the access line.)
type streamFlusher struct{ http.ResponseWriter }

func (w *streamFlusher) WriteHeader(code int) {
	w.ResponseWriter.WriteHeader(code)
	if code >= 200 && w.Header().Get("Content-Length") == "" {
		_ = http.NewResponseController(w.ResponseWriter).Flush()
	}
}

func (w *streamFlusher) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// slogWriter sends ReverseProxy's own log lines (body copy errors) to the logger.
type slogWriter struct{ l *slog.Logger }

func (s slogWriter) Write(b []byte) (int, error) {
	msg := string(b)
	if n := len(msg); n > 0 && msg[n-1] == '\n' {
		msg = msg[:n-1]
	}
	s.l.Debug("reverse proxy", telemetry.KeyDetail, msg)
	return len(b), nil
}

// isClientGone says the client cancelled or disconnected.
func isClientGone(r *http.Request, err error) bool {
	return r.Context().Err() != nil && (err == nil || errors.Is(err, context.Canceled) || errors.Is(err, r.Context().Err()))
}

// checkResumeToken refuses a request to envd of a paused secure sandbox that lacks its access
// token, as envd would refuse it were the sandbox running, instead of resuming the sandbox
// for it (a request to any other port was checked against the traffic token already).
func (p *Proxy) checkResumeToken(ctx context.Context, id, token string) error {
	if p.cfg.Backend.Authorized(ctx, id, token) {
		return nil
	}
	if sb, err := p.cfg.Backend.Lookup(ctx, id); err != nil || sb.State != store.StatePaused || !sb.AutoResume {
		return nil // envd answers for a running one; the dial explains the rest, as to nobody's
	}
	if token == "" {
		return accessTokenError("missing access token: send the sandbox's envdAccessToken in " + HeaderAccessToken)
	}
	return accessTokenError("invalid access token in " + HeaderAccessToken)
}

// accessTokenError is errAccessToken with envd's own words for it.
type accessTokenError string

func (e accessTokenError) Error() string { return string(e) }
func (e accessTokenError) Unwrap() error { return errAccessToken }
