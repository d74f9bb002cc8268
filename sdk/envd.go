package cove

import (
	"context"
	"io"
	"net/http"

	"github.com/cove-dev/cove/sdk/gen/filesystem/filesystemconnect"
	"github.com/cove-dev/cove/sdk/gen/process/processconnect"
)

// envd is one sandbox's envd, reached through the sandbox URL.
type envd struct {
	client    *Client
	sandboxID string
	http      *http.Client
	proc      processconnect.ProcessClient
	fs        filesystemconnect.FilesystemClient
}

func newEnvd(c *Client, s *Sandbox) *envd {
	hc := c.sandboxHTTP(s.ID, s.accessToken)
	return &envd{
		client:    c,
		sandboxID: s.ID,
		http:      hc,
		proc:      processconnect.NewProcessClient(hc, c.cfg.SandboxURL),
		fs:        filesystemconnect.NewFilesystemClient(hc, c.cfg.SandboxURL),
	}
}

// unary runs one envd RPC under the request timeout, turning its failure into the error a
// caller branches on.
func unary[T any](ctx context.Context, e *envd, op, user string, call func(ctx context.Context) (T, error)) (T, string, error) {
	ctx, ci := newCall(ctx, user)
	ctx, cancel := e.client.withTimeout(ctx)
	defer cancel()
	out, err := call(ctx)
	if err != nil {
		return out, ci.requestID, rpcError(ctx, op, e.sandboxID, ci, err)
	}
	return out, ci.requestID, nil
}

// httpDo makes a plain HTTP request to envd (/files, /health). The caller closes the body
// of a successful answer; a status >= 400 is an error here already, except for /health.
func (e *envd) httpDo(ctx context.Context, op, method, pathAndQuery string, body io.Reader, header http.Header) (*http.Response, *callInfo, error) {
	ctx, ci := newCall(ctx, "")
	ctx, cancel := e.client.withTimeout(ctx)
	req, err := http.NewRequestWithContext(ctx, method, e.client.cfg.SandboxURL+pathAndQuery, body)
	if err != nil {
		cancel()
		return nil, ci, &Error{Op: op, SandboxID: e.sandboxID, Message: err.Error(), RequestID: ci.requestID, Err: err}
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := e.http.Do(req)
	if err != nil {
		cancel()
		return nil, ci, transportError(ctx, op, e.sandboxID, ci.requestID, err)
	}
	if resp.StatusCode >= 400 && pathAndQuery != "/health" {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		cancel()
		return nil, ci, httpError(op, e.sandboxID, resp.StatusCode, b, ci.requestID)
	}
	resp.Body = &cancelBody{ReadCloser: resp.Body, cancel: cancel}
	return resp, ci, nil
}

// cancelBody releases the request's timeout when the body is closed.
type cancelBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}
