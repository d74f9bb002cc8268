package cove

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/cove-dev/cove/sdk/reason"
	"github.com/cove-dev/cove/sdk/requestid"
)

// Sentinel errors to branch on with errors.Is. Every error a call returns also carries the
// call's request id: see RequestIDOf.
var (
	// ErrNotFound: no such sandbox, process, file or directory. A killed sandbox is not
	// found too; its error is a *SandboxKilledError, which says why.
	ErrNotFound = errors.New("not found")
	// ErrAuth: the API key or the sandbox's access token is missing or wrong.
	ErrAuth = errors.New("authentication failed")
	// ErrConflict: the sandbox is not in a state that allows the call (pause a paused one).
	ErrConflict = errors.New("conflict")
	// ErrRateLimit: the team is over a quota (concurrent sandboxes, vCPUs, memory, create
	// rate); the message names the limit. E2B's SDKs raise RateLimitError.
	ErrRateLimit = errors.New("rate limited")
	// ErrNoSpace: a write past a size quota (a sandbox's disk, a volume's size); HTTP 507.
	ErrNoSpace = errors.New("no space left")
	// ErrTimeout: the call's own timeout passed (Config.RequestTimeout, or a command's
	// Timeout). It also matches context.DeadlineExceeded.
	ErrTimeout error = timeoutError{}
	// ErrDisconnect is the cause of a stream that CommandHandle.Disconnect ended; the
	// process keeps running.
	ErrDisconnect = errors.New("cove: disconnected from the process (it keeps running)")
	// ErrUnavailable: the server refused the connection for longer than Config.RestartWait
	// (it is restarting, or not running). The call was not received: it is safe to retry.
	ErrUnavailable = errors.New("cove: server unavailable (restarting or down); the call was not received and is safe to retry")
	// ErrCallerExit is the cause NotifyExit gives its context when the program is told to
	// exit (SIGINT, SIGTERM) or its stop function runs.
	ErrCallerExit = errors.New("cove: caller is exiting")
)

type timeoutError struct{}

func (timeoutError) Error() string { return "cove: call timed out" }

// Is makes ErrTimeout match context.DeadlineExceeded, as the context's own deadline does.
func (timeoutError) Is(target error) bool { return target == context.DeadlineExceeded }

// Error is a failed call: what was called, how the server answered, and the request id to
// find the call in the server's logs. It wraps a sentinel (ErrNotFound, ErrAuth,
// ErrConflict, ErrTimeout) or the transport's error.
type Error struct {
	Op         string // the call: "create sandbox", "process.Process/Start", "read file"
	SandboxID  string // "" for calls not about one sandbox
	StatusCode int    // HTTP status; 0 when no response came
	Code       string // Connect code of an RPC ("not_found"); "" for REST calls
	Message    string // the server's message, or the transport's error
	RequestID  string
	Err        error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("cove: ")
	b.WriteString(e.Op)
	if e.SandboxID != "" && !strings.Contains(e.Message, e.SandboxID) {
		b.WriteString(" (sandbox " + e.SandboxID + ")")
	}
	b.WriteString(": ")
	switch {
	case e.Message != "":
		b.WriteString(e.Message)
	case e.Err != nil:
		b.WriteString(e.Err.Error())
	case e.StatusCode != 0:
		b.WriteString(http.StatusText(e.StatusCode))
	}
	return requestid.Annotate(b.String(), e.RequestID)
}

func (e *Error) Unwrap() error { return e.Err }

// CommandExitError says a command ran and exited with a code other than 0, or was killed
// by a signal (ExitCode -1 and Status "signal: killed", say).
type CommandExitError struct {
	PID       uint32
	ExitCode  int
	Status    string // envd's description: "exit status 2", "signal: killed"
	Message   string // envd's error text, if any
	Stdout    string
	Stderr    string
	RequestID string
}

func (e *CommandExitError) Error() string {
	msg := fmt.Sprintf("cove: command exited with code %d", e.ExitCode)
	if e.Status != "" && e.Status != fmt.Sprintf("exit status %d", e.ExitCode) {
		msg += " (" + e.Status + ")"
	}
	if e.Message != "" {
		msg += ": " + e.Message
	} else if s := strings.TrimSpace(e.Stderr); s != "" {
		if len(s) > 200 {
			s = "..." + s[len(s)-200:]
		}
		msg += ": " + s
	}
	return requestid.Annotate(msg, e.RequestID)
}

// SandboxKilledError says the sandbox a call named was killed, why and when. It matches
// ErrNotFound with errors.Is.
type SandboxKilledError struct {
	SandboxID string
	Reason    reason.KillReason
	At        time.Time // zero when the server did not say
	RequestID string
}

func (e *SandboxKilledError) Error() string {
	msg := fmt.Sprintf("cove: sandbox %s was killed: %s", e.SandboxID, e.Reason)
	if !e.At.IsZero() {
		msg += " at " + e.At.UTC().Format(time.RFC3339)
	}
	return requestid.Annotate(msg, e.RequestID)
}

// Is makes a killed sandbox match ErrNotFound.
func (e *SandboxKilledError) Is(target error) bool { return target == ErrNotFound }

// RequestIDOf returns the request id carried by err or any error it wraps, or "".
func RequestIDOf(err error) string {
	var e *Error
	var exit *CommandExitError
	var killed *SandboxKilledError
	switch {
	case errors.As(err, &killed):
		return killed.RequestID
	case errors.As(err, &exit):
		return exit.RequestID
	case errors.As(err, &e):
		return e.RequestID
	}
	return ""
}

// killedRE matches the server's message for a killed sandbox:
// "sandbox X was killed: <reason> at <RFC 3339 time>".
var killedRE = regexp.MustCompile(`sandbox (\S+) was killed: ([a-z_]+)(?: at (\S+))?`)

// parseKilled reads a killed sandbox out of an error message, or returns nil.
func parseKilled(msg, requestID string) *SandboxKilledError {
	m := killedRE.FindStringSubmatch(msg)
	if m == nil {
		return nil
	}
	return killedError(m[1], m[2], m[3], requestID)
}

func killedError(id, why, at, requestID string) *SandboxKilledError {
	r, err := reason.ParseKillReason(why)
	if err != nil {
		r = reason.KillUnknown
	}
	e := &SandboxKilledError{SandboxID: id, Reason: r, RequestID: requestID}
	if t, err := time.Parse(time.RFC3339, strings.TrimRight(at, ".,;)")); err == nil && t.Year() > 1 {
		e.At = t
	}
	return e
}

// errorBody is the JSON error of the REST API, of the proxy and of envd's HTTP endpoints.
type errorBody struct {
	Code       int    `json:"code"`
	Message    string `json:"message"`
	RequestID  string `json:"requestId"`
	SandboxID  string `json:"sandboxId"`
	State      string `json:"state"`
	KillReason string `json:"killReason"`
	// Detail is Cove's reason beside E2B's fixed message (the proxy's "The sandbox was not
	// found").
	Detail string `json:"detail"`
}

// httpError turns a failed HTTP answer into the error a caller branches on. The body is
// Cove's JSON error when it parses; anything else becomes the message.
func httpError(op, sandboxID string, status int, body []byte, requestID string) error {
	var eb errorBody
	msg := strings.TrimSpace(string(body))
	if json.Unmarshal(body, &eb) == nil && (eb.Message != "" || eb.Code != 0) {
		msg = eb.Message
		if eb.Detail != "" {
			msg = eb.Detail
		}
		if eb.State == "killed" {
			id := eb.SandboxID
			if id == "" {
				id = sandboxID
			}
			if k := parseKilled(msg, requestID); k != nil {
				k.Reason = parseReason(eb.KillReason, k.Reason)
				return k
			}
			return killedError(id, eb.KillReason, "", requestID)
		}
	}
	if status == http.StatusNotFound || status == http.StatusBadGateway {
		if k := parseKilled(msg, requestID); k != nil {
			return k
		}
	}
	if len(msg) > 1000 {
		msg = msg[:1000] + "..."
	}
	return &Error{Op: op, SandboxID: sandboxID, StatusCode: status, Message: msg, RequestID: requestID, Err: sentinelForStatus(status)}
}

func parseReason(s string, def reason.KillReason) reason.KillReason {
	if r, err := reason.ParseKillReason(s); err == nil && s != "" {
		return r
	}
	return def
}

func sentinelForStatus(status int) error {
	switch status {
	case http.StatusNotFound:
		return ErrNotFound
	case http.StatusUnauthorized, http.StatusForbidden:
		return ErrAuth
	case http.StatusConflict:
		return ErrConflict
	case http.StatusTooManyRequests:
		return ErrRateLimit
	case http.StatusInsufficientStorage:
		return ErrNoSpace
	case http.StatusGatewayTimeout, http.StatusRequestTimeout:
		return ErrTimeout
	}
	return nil
}

func sentinelForCode(code connect.Code) error {
	switch code {
	case connect.CodeNotFound:
		return ErrNotFound
	case connect.CodeUnauthenticated, connect.CodePermissionDenied:
		return ErrAuth
	case connect.CodeDeadlineExceeded:
		return ErrTimeout
	case connect.CodeAlreadyExists, connect.CodeFailedPrecondition:
		return ErrConflict
	}
	return nil
}

// rpcError turns an envd RPC's failure into the error a caller branches on: the proxy's
// JSON answer for a killed or paused sandbox when the transport saw one, the context's
// cause when the caller gave up, else the Connect error.
func rpcError(ctx context.Context, op, sandboxID string, ci *callInfo, err error) error {
	if ci != nil {
		if pe := ci.proxyError(); pe != nil {
			return pe
		}
	}
	if ctx.Err() != nil {
		cause := context.Cause(ctx)
		e := &Error{Op: op, SandboxID: sandboxID, Message: cause.Error(), RequestID: ci.id(), Err: cause}
		if errors.Is(cause, context.DeadlineExceeded) && !errors.Is(cause, ErrTimeout) {
			e.Err = fmt.Errorf("%w: %w", ErrTimeout, cause)
		}
		return e
	}
	code := connect.CodeOf(err)
	msg := err.Error()
	var ce *connect.Error
	if errors.As(err, &ce) {
		msg = ce.Message()
	}
	if k := parseKilled(msg, ci.id()); k != nil {
		return k
	}
	wrapped := err
	if sentinel := sentinelForCode(code); sentinel != nil {
		wrapped = fmt.Errorf("%w: %w", sentinel, err)
	}
	return &Error{Op: op, SandboxID: sandboxID, Code: code.String(), Message: msg, RequestID: ci.id(), Err: wrapped}
}
