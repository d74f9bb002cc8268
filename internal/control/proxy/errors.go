package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/cove-dev/cove/internal/control/orchestrator"
	"github.com/cove-dev/cove/internal/errdefs"
	"github.com/cove-dev/cove/internal/httpx"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/store"
	cove "github.com/cove-dev/cove/sdk"
	"github.com/cove-dev/cove/sdk/requestid"
)

// statusClientClosed is nginx's status for a client that went away; it is only logged.
const statusClientClosed = errdefs.StatusClientClosed

// msgNotFound is E2B's message for a sandbox that is gone or unknown, word for word: the
// SDKs' own tests assert it. Cove's reason goes in the body's Detail and HeaderReason.
const msgNotFound = "The sandbox was not found"

// HeaderReason carries Cove's reason for a proxy error whose body keeps E2B's fixed message:
// the sandbox was killed (why and when) or never existed.
const HeaderReason = "X-Cove-Reason"

// describe maps an error to the status and body the client gets. It is the one place that
// mapping lives. A sandbox that is gone, paused or unknown is a 502 on every path, as E2B
// answers: the SDKs' isRunning() reads a 502 from /health as "not running".
func describe(err error, t target) (int, cove.ErrorBody) {
	body := cove.ErrorBody{SandboxID: t.id, Port: t.port}
	var gone *orchestrator.GoneError
	var paused *orchestrator.PausedError
	switch {
	case errors.Is(err, errNoSigned), errors.Is(err, errBadTarget), errors.Is(err, errTrafficToken), errors.Is(err, errAccessToken):
		body.Code = errdefs.Status(err)
		body.Message = err.Error()
	case errors.As(err, &gone):
		body.Code = http.StatusBadGateway
		body.State = string(store.StateKilled)
		body.KillReason = gone.Reason.String()
		body.Message, body.Detail = msgNotFound, gone.Error()
	case errors.As(err, &paused):
		body.Code = http.StatusBadGateway
		body.State = string(store.StatePaused)
		body.Message = paused.Error()
	case errors.Is(err, orchestrator.ErrNotFound), errors.Is(err, store.ErrNotFound):
		body.Code = http.StatusBadGateway
		body.Message, body.Detail = msgNotFound, fmt.Sprintf("sandbox %s not found", t.id)
	case errors.Is(err, context.Canceled):
		body.Code = statusClientClosed
		body.Message = "client went away: " + err.Error()
	default:
		body.Code = http.StatusBadGateway
		body.Message = fmt.Sprintf("sandbox %s port %d: %v", t.id, t.port, err)
	}
	return body.Code, body
}

// errNotYours is what a caller who has not shown it may see a sandbox learns about it,
// whatever its state: the same answer for a sandbox that never existed, one that was
// killed and another team's.
var errNotYours = errors.New("not found or not yours")

// fail answers r with err as JSON and records it for the access line (the full error).
func (p *Proxy) fail(w http.ResponseWriter, r *http.Request, t target, err error) {
	ctx := r.Context()
	httpx.NoteFrom(ctx).Err = err
	code, body := describe(err, t)
	token := r.Header.Get(HeaderAccessToken)
	if t.accessToken != "" {
		token = t.accessToken
	}
	if code == http.StatusBadGateway && !t.signed && !p.cfg.Backend.Authorized(ctx, t.id, token) {
		err = fmt.Errorf("%w: sandbox %s %w", orchestrator.ErrNotFound, t.id, errNotYours)
		code, body = http.StatusBadGateway, cove.ErrorBody{Code: http.StatusBadGateway, SandboxID: t.id,
			Message: msgNotFound, Detail: fmt.Sprintf("sandbox %s %s", t.id, errNotYours)}
	}
	body.RequestID = telemetry.RequestID(ctx)
	if proto := rpcProtocolOf(r); proto != notRPC && code != statusClientClosed {
		// An RPC gets its error in its own protocol, so the SDK shows this message and
		// raises NotFoundError or TimeoutError, not a transport error about a 502. Its
		// message is Cove's reason: the SDK shows it in place of E2B's fixed text.
		msg := body.Message
		if body.Detail != "" {
			msg = body.Detail
		}
		writeRPCError(w, proto, err, code, requestid.Annotate(msg, body.RequestID))
		return
	}
	h := w.Header()
	if body.Detail != "" {
		// E2B's message stays word for word; Cove's reason is in detail and this header.
		body.Detail = requestid.Annotate(body.Detail, body.RequestID)
		h.Set(HeaderReason, body.Detail)
	} else {
		body.Message = requestid.Annotate(body.Message, body.RequestID)
	}
	b, _ := json.Marshal(body)
	b = append(b, '\n')
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

// upstreamError is ReverseProxy's ErrorHandler: the dial or the round trip failed before
// any response byte reached the client. A failure that is not about the sandbox's state is
// explained by looking the sandbox up: it may have been paused or killed meanwhile.
func (p *Proxy) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	if g, ok := r.Body.(*httpx.GuardedBody); ok {
		g.Drain(http.NewResponseController(w))
	}
	t, _ := r.Context().Value(targetKey{}).(target)
	if isClientGone(r, err) {
		httpx.NoteFrom(r.Context()).Err = fmt.Errorf("client went away: %w", err)
		w.WriteHeader(statusClientClosed)
		return
	}
	if code, _ := describe(err, t); code == http.StatusBadGateway && !isStateError(err) {
		if _, lerr := p.cfg.Backend.Lookup(r.Context(), t.id); lerr != nil {
			err = fmt.Errorf("%w (%v)", lerr, err)
		}
	}
	p.fail(w, r, t, err)
}

// errWasPaused says a sandbox was paused while a response from it was open.
var errWasPaused = errors.New("was paused")

// isStateError says err already explains the sandbox's state.
func isStateError(err error) bool {
	var gone *orchestrator.GoneError
	var paused *orchestrator.PausedError
	return errors.As(err, &gone) || errors.As(err, &paused) || errors.Is(err, errWasPaused) ||
		errors.Is(err, orchestrator.ErrNotFound) || errors.Is(err, store.ErrNotFound)
}

// cutReason explains a response that was cut after it began: the client left, or the
// sandbox was paused or killed (its connections are closed), or the upstream failed.
func (p *Proxy) cutReason(ctx context.Context, id string, r *http.Request) error {
	if r.Context().Err() != nil {
		return fmt.Errorf("response cut: client went away: %w", context.Cause(r.Context()))
	}
	if id == "" {
		return errors.New("response cut")
	}
	sb, err := p.cfg.Backend.Lookup(ctx, id)
	switch {
	case err != nil:
		return fmt.Errorf("response cut: %w", err)
	case sb.State == store.StatePaused:
		return fmt.Errorf("response cut: sandbox %s %w", id, errWasPaused)
	case sb.State != store.StateRunning:
		return fmt.Errorf("response cut: sandbox %s is %s", id, sb.State)
	default:
		return errors.New("response cut: upstream connection failed")
	}
}
