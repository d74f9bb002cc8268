package cove_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	cove "github.com/cove-dev/cove/sdk"
	"github.com/cove-dev/cove/sdk/reason"
)

// killableDialer remembers the connections it makes, so a test can cut them mid-stream.
type killableDialer struct {
	mu    sync.Mutex
	conns []net.Conn
}

func (d *killableDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err == nil {
		d.mu.Lock()
		d.conns = append(d.conns, c)
		d.mu.Unlock()
	}
	return c, err
}

func (d *killableDialer) cutAll() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.conns {
		_ = c.Close()
	}
	d.conns = nil
}

// TestCancelCauseJoinsEnvdLog proves the promise for each cancel cause: the SDK's one
// "stream cancelled" line and envd's one "stream end" line carry the same request id,
// and envd's line says the matching end.
func TestCancelCauseJoinsEnvdLog(t *testing.T) {
	needServer(t)
	c, sdkLog := newClient(t, cove.Config{})
	sb := newSandbox(t, c, cove.SandboxOptions{})
	const longCmd = `for i in $(seq 1 300); do echo tick $i; sleep 0.1; done`

	// startTicking starts longCmd on sb under ctx and waits for its first output.
	startTicking := func(t *testing.T, ctx context.Context, sb *cove.Sandbox, opts ...cove.Option) *cove.CommandHandle {
		t.Helper()
		first := make(chan struct{})
		var once sync.Once
		opts = append(opts, cove.OnStdout(func(string) { once.Do(func() { close(first) }) }))
		h, err := sb.Commands.Start(ctx, longCmd, opts...)
		if err != nil {
			t.Fatalf("start: %v", err)
		}
		t.Cleanup(func() { _ = sb.Commands.Kill(context.Background(), h.PID()) })
		select {
		case <-first:
		case <-time.After(10 * time.Second):
			t.Fatal("no output within 10 s")
		}
		return h
	}

	cases := []struct {
		name      string
		cause     reason.CancelCause
		level     string
		envdEnd   reason.StreamEnd
		envdLevel string
		// run starts a stream, ends it by the cause, and returns its handle and the error
		// Wait gave.
		run func(t *testing.T) (*cove.CommandHandle, error)
		// check looks at Wait's error.
		check func(t *testing.T, err error)
	}{
		{
			name:  "the command's timeout logs timeout and envd logs deadline",
			cause: reason.CancelTimeout, level: "WARN", envdEnd: reason.StreamDeadline, envdLevel: "WARN",
			run: func(t *testing.T) (*cove.CommandHandle, error) {
				h := startTicking(t, context.Background(), sb, cove.Timeout(1500*time.Millisecond))
				_, err := h.Wait(ctxFor(t, time.Minute))
				return h, err
			},
			check: func(t *testing.T, err error) {
				if !errors.Is(err, cove.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("Wait: %v, want ErrTimeout and context.DeadlineExceeded", err)
				}
			},
		},
		{
			name:  "a sibling's cancel logs sibling_cancel with its cause and envd logs client_cancel",
			cause: reason.CancelSibling, level: "WARN", envdEnd: reason.StreamClientCancel, envdLevel: "INFO",
			run: func(t *testing.T) (*cove.CommandHandle, error) {
				ctx, cancel := context.WithCancelCause(context.Background())
				h := startTicking(t, ctx, sb)
				cancel(errors.New("sibling task failed: disk full"))
				_, err := h.Wait(ctxFor(t, time.Minute))
				return h, err
			},
			check: func(t *testing.T, err error) {
				if err == nil || !strings.Contains(err.Error(), "sibling task failed") {
					t.Errorf("Wait: %v, want the sibling's cause", err)
				}
			},
		},
		{
			name:  "SIGTERM under NotifyExit logs caller_exit and envd logs client_cancel",
			cause: reason.CancelCallerExit, level: "INFO", envdEnd: reason.StreamClientCancel, envdLevel: "INFO",
			run: func(t *testing.T) (*cove.CommandHandle, error) {
				ctx, stop := cove.NotifyExit(context.Background())
				defer stop()
				h := startTicking(t, ctx, sb)
				if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
				_, err := h.Wait(ctxFor(t, time.Minute))
				return h, err
			},
			check: func(t *testing.T, err error) {
				if !errors.Is(err, cove.ErrCallerExit) {
					t.Errorf("Wait: %v, want ErrCallerExit", err)
				}
			},
		},
		{
			name:  "Disconnect logs disconnect and envd logs client_cancel",
			cause: reason.CancelDisconnect, level: "INFO", envdEnd: reason.StreamClientCancel, envdLevel: "INFO",
			run: func(t *testing.T) (*cove.CommandHandle, error) {
				h := startTicking(t, context.Background(), sb)
				h.Disconnect()
				_, err := h.Wait(ctxFor(t, time.Minute))
				return h, err
			},
			check: func(t *testing.T, err error) {
				if !errors.Is(err, cove.ErrDisconnect) {
					t.Errorf("Wait: %v, want ErrDisconnect", err)
				}
			},
		},
		{
			// Cutting the client's TCP connection mid-stream: the SDK sees the transport
			// fail; the proxy sees its client gone and cancels the upstream request, so
			// envd sees a client that left.
			name:  "a cut connection logs rpc_error with its code and envd logs client_cancel",
			cause: reason.CancelRPCError, level: "WARN", envdEnd: reason.StreamClientCancel, envdLevel: "INFO",
			run: func(t *testing.T) (*cove.CommandHandle, error) {
				d := &killableDialer{}
				hc := &http.Client{Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}
				c2 := cove.NewClient(cove.Config{APIURL: server.URL, APIKey: server.APIKey, HTTPClient: hc, Logger: c.Config().Logger})
				sb2, err := c2.Connect(ctxFor(t, time.Minute), sb.ID, 0)
				if err != nil {
					t.Fatalf("connect: %v", err)
				}
				h := startTicking(t, context.Background(), sb2)
				d.cutAll()
				_, err = h.Wait(ctxFor(t, time.Minute))
				return h, err
			},
			check: func(t *testing.T, err error) {
				var e *cove.Error
				if !errors.As(err, &e) || e.Code == "" {
					t.Errorf("Wait: %v, want a *cove.Error with a Connect code", err)
				}
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h, err := tc.run(t)
			tc.check(t, err)
			id := h.RequestID()
			if got := cove.RequestIDOf(err); got != id {
				t.Errorf("RequestIDOf(Wait's error) = %q, want the stream's %q", got, id)
			}

			sdk := sdkLog.lines("stream cancelled", id)
			if len(sdk) != 1 {
				t.Fatalf("SDK logged %d \"stream cancelled\" lines for request %s, want 1:\n%s", len(sdk), id, sdkLog)
			}
			line := sdk[0]
			want := map[string]any{
				"level": tc.level, "cancel.cause": string(tc.cause), "sandbox.id": sb.ID,
				"rpc.method": "process.Process/Start", "stream.phase": "streaming", "process.pid": float64(h.PID()),
			}
			for k, v := range want {
				if line[k] != v {
					t.Errorf("SDK line %s = %v, want %v (line %v)", k, line[k], v, line)
				}
			}
			switch tc.cause {
			case reason.CancelSibling:
				if d, _ := line["cancel.detail"].(string); !strings.Contains(d, "sibling task failed") {
					t.Errorf("SDK line cancel.detail = %q, want the sibling's cause", d)
				}
			case reason.CancelRPCError:
				if line["rpc.connect.code"] == nil {
					t.Errorf("SDK line has no rpc.connect.code: %v", line)
				}
			}

			envd := envdLines(t, sb.ID, "stream end", id, 1)
			if len(envd) != 1 {
				t.Fatalf("envd logged %d \"stream end\" lines for request %s, want 1; its lines with that id:\n%s", len(envd), id, envdLog(sb.ID, id))
			}
			e := envd[0]
			if e["stream.end"] != string(tc.envdEnd) || e["level"] != tc.envdLevel {
				t.Errorf("envd's stream end: stream.end=%v level=%v, want %s %s (line %v)", e["stream.end"], e["level"], tc.envdEnd, tc.envdLevel, e)
			}
			t.Logf("SDK:  %v\nenvd: %v", line, e)
			if e["process.pid"] != float64(h.PID()) || e["rpc.method"] != "process.Process/Start" {
				t.Errorf("envd's stream end: pid %v method %v, want %d process.Process/Start", e["process.pid"], e["rpc.method"], h.PID())
			}
		})
	}
}

// TestStreamCancelledBeforeStart: a context already cancelled gives one line in phase
// before_start.
func TestStreamCancelledBeforeStart(t *testing.T) {
	needServer(t)
	c, sdkLog := newClient(t, cove.Config{})
	sb := newSandbox(t, c, cove.SandboxOptions{})
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(errors.New("gave up early"))
	_, err := sb.Commands.Run(ctx, "echo never")
	if err == nil {
		t.Fatal("Run under a cancelled context succeeded")
	}
	id := cove.RequestIDOf(err)
	lines := sdkLog.lines("stream cancelled", id)
	if id == "" || len(lines) != 1 {
		t.Fatalf("request id %q, %d lines, want one line:\n%s", id, len(lines), sdkLog)
	}
	if lines[0]["stream.phase"] != "before_start" || lines[0]["cancel.cause"] != "sibling_cancel" {
		t.Errorf("line %v, want before_start sibling_cancel", lines[0])
	}
}

// TestStreamCutByKill: killing the sandbox under a stream cuts it; the SDK logs rpc_error
// with the kill reason, and Wait returns a *SandboxKilledError. envd dies with its sandbox
// and may log no stream end at all, so only the SDK's side is asserted.
func TestStreamCutByKill(t *testing.T) {
	needServer(t)
	c, sdkLog := newClient(t, cove.Config{})
	sb := newSandbox(t, c, cove.SandboxOptions{})
	ctx := ctxFor(t, time.Minute)
	h, err := sb.Commands.Start(ctx, "sleep 60")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Kill(ctx, sb.ID); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	_, err = h.Wait(ctx)
	var killed *cove.SandboxKilledError
	if !errors.As(err, &killed) || killed.Reason != reason.KillRequest {
		t.Fatalf("Wait: %v, want a *SandboxKilledError with reason request", err)
	}
	lines := sdkLog.lines("stream cancelled", h.RequestID())
	if len(lines) != 1 || lines[0]["cancel.cause"] != "rpc_error" || lines[0]["kill_reason"] != "request" {
		t.Fatalf("SDK lines %v, want one rpc_error line with kill_reason request", lines)
	}
	t.Logf("SDK: %v\nenvd: %s", lines[0], envdLog(sb.ID, h.RequestID()))
}
