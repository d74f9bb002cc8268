package cove

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Client talks to one Cove server: the REST API for sandboxes, and through the sandbox URL
// each sandbox's envd. It is safe for concurrent use; make one and share it.
type Client struct {
	cfg  Config
	rt   *transport
	http *http.Client
}

// NewClient returns a client for cfg, its empty fields read from the environment (see
// Config).
func NewClient(cfg Config) *Client {
	cfg = cfg.resolve()
	base := http.DefaultTransport
	hc := &http.Client{}
	if cfg.HTTPClient != nil {
		*hc = *cfg.HTTPClient
		if hc.Transport != nil {
			base = hc.Transport
		}
	}
	rt := &transport{base: base, logger: cfg.Logger, restartWait: cfg.RestartWait}
	hc.Transport = rt
	return &Client{cfg: cfg, rt: rt, http: hc}
}

// Config returns the client's configuration, environment and defaults applied.
func (c *Client) Config() Config { return c.cfg }

// sandboxHTTP returns an HTTP client that routes every request to one sandbox's envd.
func (c *Client) sandboxHTTP(id, token string) *http.Client {
	hc := *c.http
	hc.Transport = c.rt.forSandbox(id, token)
	return &hc
}

// withTimeout applies the request timeout to a call that is not a stream.
func (c *Client) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if c.cfg.RequestTimeout < 0 {
		return ctx, func() {}
	}
	return context.WithTimeoutCause(ctx, c.cfg.RequestTimeout, fmt.Errorf("%w after %s (Config.RequestTimeout)", ErrTimeout, c.cfg.RequestTimeout))
}

// rest is one REST call's outcome.
type rest struct {
	requestID string
	status    int
	header    http.Header
}

// do makes a REST call: in (if not nil) is the JSON body, out (if not nil) receives the
// JSON answer. Any status >= 400 is an error.
func (c *Client) do(ctx context.Context, op, sandboxID, method, path string, in, out any) (rest, error) {
	ctx, ci := newCall(ctx, "")
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	res := rest{requestID: ci.requestID}
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return res, &Error{Op: op, SandboxID: sandboxID, Message: err.Error(), RequestID: ci.requestID, Err: err}
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.cfg.APIURL+path, body)
	if err != nil {
		return res, &Error{Op: op, SandboxID: sandboxID, Message: err.Error(), RequestID: ci.requestID, Err: err}
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.cfg.APIKey != "" {
		req.Header.Set("X-API-Key", c.cfg.APIKey)
	}
	if c.cfg.AdminToken != "" && strings.HasPrefix(path, "/admin/") {
		req.Header.Set("X-Admin-Token", c.cfg.AdminToken)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return res, transportError(ctx, op, sandboxID, ci.requestID, err)
	}
	defer resp.Body.Close()
	res.status, res.header = resp.StatusCode, resp.Header
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return res, transportError(ctx, op, sandboxID, ci.requestID, err)
	}
	if resp.StatusCode >= 400 {
		return res, httpError(op, sandboxID, resp.StatusCode, b, ci.requestID)
	}
	if out != nil && len(bytes.TrimSpace(b)) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			return res, &Error{Op: op, SandboxID: sandboxID, StatusCode: resp.StatusCode,
				Message: fmt.Sprintf("decode answer: %v", err), RequestID: ci.requestID, Err: err}
		}
	}
	return res, nil
}

// transportError explains a request that got no answer: the context's cause when the
// caller or the timeout ended it, else the transport's error.
func transportError(ctx context.Context, op, sandboxID, requestID string, err error) error {
	if ctx.Err() != nil {
		cause := context.Cause(ctx)
		wrapped := cause
		if errors.Is(cause, context.DeadlineExceeded) && !errors.Is(cause, ErrTimeout) {
			wrapped = fmt.Errorf("%w: %w", ErrTimeout, cause)
		}
		return &Error{Op: op, SandboxID: sandboxID, Message: cause.Error(), RequestID: requestID, Err: wrapped}
	}
	return &Error{Op: op, SandboxID: sandboxID, Message: err.Error(), RequestID: requestID, Err: err}
}

// seconds renders a duration as E2B's whole seconds, at least 1 when d > 0.
func seconds(d time.Duration) int64 {
	s := int64(d / time.Second)
	if d > 0 && s == 0 {
		s = 1
	}
	return s
}
