package cove

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// callInfo is one call: its request id, and what the transport learned on the way.
type callInfo struct {
	requestID string
	user      string // Authorization: Basic <user>: on envd calls; "" sends none

	mu       sync.Mutex
	proxyErr error // the proxy's answer about a killed or paused sandbox
}

func (c *callInfo) id() string {
	if c == nil {
		return ""
	}
	return c.requestID
}

func (c *callInfo) proxyError() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.proxyErr
}

type callKey struct{}

// newCall starts a call: it takes the caller's id (WithRequestID) or mints one.
func newCall(ctx context.Context, user string) (context.Context, *callInfo) {
	ci := &callInfo{requestID: requestIDFor(ctx), user: user}
	return context.WithValue(ctx, callKey{}, ci), ci
}

func callFrom(ctx context.Context) *callInfo {
	ci, _ := ctx.Value(callKey{}).(*callInfo)
	return ci
}

// Headers that route a request to a sandbox's port through the sandbox URL.
const (
	headerSandboxID   = "E2b-Sandbox-Id"
	headerSandboxPort = "E2b-Sandbox-Port"
	headerAccessToken = "X-Access-Token"
	headerKeepalive   = "Keepalive-Ping-Interval"
)

// transport stamps every request with its call's request id, and for a sandbox the
// routing headers and access token; it checks the id the server echoes, keeps the proxy's
// explanation of a 502, and logs a DEBUG line per request.
type transport struct {
	base        http.RoundTripper
	logger      *slog.Logger
	restartWait time.Duration // see Config.RestartWait
	// Set on a sandbox's copy.
	sandboxID   string
	accessToken string
}

func (t *transport) forSandbox(id, token string) *transport {
	c := *t
	c.sandboxID, c.accessToken = id, token
	return &c
}

func (t *transport) RoundTrip(r *http.Request) (*http.Response, error) {
	ctx := r.Context()
	ci := callFrom(ctx)
	r = r.Clone(ctx)
	if ci != nil {
		r.Header.Set(HeaderRequestID, ci.requestID)
		if ci.user != "" && t.sandboxID != "" && r.URL.Path != "/files" {
			r.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(ci.user+":")))
		}
	}
	if t.sandboxID != "" {
		r.Header.Set(headerSandboxID, t.sandboxID)
		r.Header.Set(headerSandboxPort, strconv.Itoa(EnvdPort))
		if t.accessToken != "" {
			r.Header.Set(headerAccessToken, t.accessToken)
		}
	}
	begun := time.Now()
	resp, err := t.roundTrip(r)
	attrs := []any{keyRequestID, ci.id(), keyHTTPMethod, r.Method, keyURLPath, r.URL.Path}
	if t.sandboxID != "" {
		attrs = append(attrs, keySandboxID, t.sandboxID)
	}
	if err != nil {
		t.logger.DebugContext(ctx, "http request failed", append(attrs, keyError, err.Error())...)
		return nil, err
	}
	if echoed := resp.Header.Get(HeaderRequestID); ci != nil && echoed != "" && echoed != ci.requestID {
		t.logger.WarnContext(ctx, "request id mismatch: the server logged this call under another id",
			append(attrs, keyServerRequestID, echoed)...)
	}
	if t.sandboxID != "" && resp.StatusCode == http.StatusBadGateway && ci != nil &&
		strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		// The proxy explains a sandbox it cannot reach; connect-go would drop the body.
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(body))
		if e := httpError("reach sandbox", t.sandboxID, resp.StatusCode, body, ci.requestID); e != nil {
			ci.mu.Lock()
			ci.proxyErr = e
			ci.mu.Unlock()
		}
	}
	t.logger.DebugContext(ctx, "http request", append(attrs,
		keyHTTPStatus, resp.StatusCode,
		keyDurationMS, float64(time.Since(begun).Microseconds())/1000)...)
	return resp, nil
}

// roundTrip sends r, and sends it again while the server refuses connections (a restart),
// for up to restartWait: a refused connection means the server never saw the request.
func (t *transport) roundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(r)
	if err == nil || !errors.Is(err, syscall.ECONNREFUSED) || t.restartWait < 0 {
		return resp, err
	}
	deadline := time.Now().Add(t.restartWait)
	for wait := 50 * time.Millisecond; errors.Is(err, syscall.ECONNREFUSED); wait = min(2*wait, time.Second) {
		if r.Body != nil && r.GetBody == nil || time.Now().Add(wait).After(deadline) {
			return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		t.logger.DebugContext(r.Context(), "server refused the connection; trying again", keyRetryInMS, wait.Milliseconds(), keyError, err.Error())
		select {
		case <-r.Context().Done():
			return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
		case <-time.After(wait):
		}
		if r.Body != nil {
			body, berr := r.GetBody()
			if berr != nil {
				return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
			}
			r = r.Clone(r.Context())
			r.Body = body
		}
		resp, err = t.base.RoundTrip(r)
	}
	return resp, err
}
