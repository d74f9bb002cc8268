package proxy

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/cove-dev/cove/internal/control/orchestrator"
	"github.com/cove-dev/cove/internal/httpx"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/sdk/requestid"
)

// A Connect, gRPC or gRPC-Web stream whose upstream is cut (its sandbox was killed or paused, and
// the orchestrator closed the connection) ends with a last frame carrying the error, in
// the stream's own protocol (gRPC: grpc-status trailers), instead of an aborted HTTP response: for a
// killed sandbox, the SDK then raises its TimeoutError "…: The sandbox was killed or reached its end
// of life while the request was in flight" after "sandbox X was killed: timeout at …", rather than
// a network error. A stream cut by the server's own stop ends with unavailable, naming the stop.
//
// The proxy cannot end a stream cleanly in the middle of a frame, so the body is read
// through frameReader, which knows where frames begin. A cut at a frame boundary (the usual
// case: envd writes each frame whole) gets the error frame; a cut inside one stays an abort.

// wrapStream makes res's body end with an error frame (gRPC: trailers) when its upstream
// is cut. Only a successful framed response of a Connect stream, gRPC or gRPC-Web call is
// wrapped.
func (p *Proxy) wrapStream(res *http.Response) {
	req := res.Request
	if req == nil || res.StatusCode != http.StatusOK || res.Body == nil || res.Body == http.NoBody {
		return
	}
	proto := rpcProtocolOf(req)
	if !isFramed(proto, res.Header.Get("Content-Type")) {
		return
	}
	res.Body = &frameReader{body: res.Body, onCut: func(err error) ([]byte, bool) {
		code, grpcStatus, message, ok := p.explainCut(req.Context(), req, err)
		if !ok {
			return nil, false
		}
		if proto == grpcHTTP2 {
			// gRPC ends in trailers; ReverseProxy copies res.Trailer after the body.
			if res.Trailer == nil {
				res.Trailer = http.Header{}
			}
			res.Trailer.Set("Grpc-Status", strconv.Itoa(grpcStatus))
			res.Trailer.Set("Grpc-Message", grpcEscape(message))
			return nil, true
		}
		return rpcEndFrame(proto, code, grpcStatus, message), true
	}}
}

// isFramed says a response of proto with content type ct is a framed stream.
func isFramed(proto rpcProtocol, ct string) bool {
	ct = strings.ToLower(ct)
	switch proto {
	case connectStream:
		return strings.HasPrefix(ct, "application/connect+")
	case grpcWeb:
		return strings.HasPrefix(ct, "application/grpc-web")
	case grpcHTTP2:
		return strings.HasPrefix(ct, "application/grpc") && !strings.HasPrefix(ct, "application/grpc-web")
	}
	return false
}

// explainCut says why the upstream of r was cut, as an RPC code and message, and records
// it for the access line; not ok when the client itself went away (nobody is left to read).
func (p *Proxy) explainCut(ctx context.Context, r *http.Request, upstreamErr error) (code string, grpcStatus int, message string, ok bool) {
	if ctx.Err() != nil {
		return "", 0, "", false
	}
	t, _ := ctx.Value(targetKey{}).(target)
	var err error
	if p.stopping.Load() {
		err = fmt.Errorf("response cut: %w", errStopping)
	} else {
		err = p.cutReason(ctx, t.id, r)
	}
	httpx.NoteFrom(ctx).Err = err
	telemetry.Logger(ctx).Debug("proxy: stream ended with an error", telemetry.KeyError, err.Error(), telemetry.KeyUpstreamError, upstreamErr.Error())
	switch {
	case errors.Is(err, errStopping):
		// The sandbox lives on; the SDK raises its "probably not running anymore" or
		// timeout error with this message, which names the stop.
		code, grpcStatus = "unavailable", 14
	case isGone(err):
		// The E2B SDKs read an unknown error saying "terminated" as a connection dropped
		// mid-request: they probe /health (502 for a sandbox that is gone) and raise their
		// TimeoutError "…: The sandbox was killed or reached its end of life while the
		// request was in flight", keeping this message, Cove's reason, in front.
		code, grpcStatus = "unknown", 2
		err = fmt.Errorf("%w; the stream was terminated", err)
	default:
		code, grpcStatus, _ = rpcCode(err, 0)
	}
	message = requestid.Annotate(err.Error(), telemetry.RequestID(ctx))
	return code, grpcStatus, message, true
}

// isGone says err is about a sandbox that was killed or does not exist (not a paused one).
func isGone(err error) bool {
	var gone *orchestrator.GoneError
	return errors.As(err, &gone) || errors.Is(err, orchestrator.ErrNotFound) || errors.Is(err, store.ErrNotFound)
}

// frameReader passes a framed body through unchanged and tracks frame boundaries. When the
// upstream read fails at a boundary and the stream has not ended, it yields the bytes
// onCut returns and then io.EOF; when onCut is not ok, the read error stays.
type frameReader struct {
	body  io.ReadCloser
	onCut func(error) ([]byte, bool)

	mu       sync.Mutex // Read and Close may run on different goroutines
	header   [5]byte
	headerN  int    // bytes of the current frame's header seen
	left     uint64 // bytes of the current frame's payload still to come
	ended    bool   // an end-of-stream frame went through
	tail     []byte // the error frame, being handed out
	finished bool   // the body has ended; after tail, io.EOF
}

func (f *frameReader) Read(b []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.finished {
		if len(f.tail) == 0 {
			return 0, io.EOF
		}
		n := copy(b, f.tail)
		f.tail = f.tail[n:]
		return n, nil
	}
	n, err := f.body.Read(b)
	f.track(b[:n])
	if err == nil || errors.Is(err, io.EOF) {
		return n, err
	}
	if f.ended || f.headerN != 0 || f.left != 0 {
		return n, err // mid-frame, or after the stream's own end: nothing valid to add
	}
	frame, ok := f.onCut(err)
	if !ok {
		return n, err
	}
	f.finished, f.tail = true, frame
	if len(f.tail) == 0 {
		return n, io.EOF
	}
	if n > 0 {
		return n, nil
	}
	c := copy(b, f.tail)
	f.tail = f.tail[c:]
	return c, nil
}

// track advances the frame parser over b.
func (f *frameReader) track(b []byte) {
	for len(b) > 0 {
		if f.left > 0 {
			k := min(uint64(len(b)), f.left)
			f.left -= k
			b = b[k:]
			continue
		}
		k := copy(f.header[f.headerN:], b)
		f.headerN += k
		b = b[k:]
		if f.headerN == len(f.header) {
			f.headerN = 0
			f.left = uint64(binary.BigEndian.Uint32(f.header[1:]))
			if f.header[0]&0x82 != 0 { // Connect end-stream (0x02) or gRPC-Web trailers (0x80)
				f.ended = true
			}
		}
	}
}

func (f *frameReader) Close() error { return f.body.Close() }
