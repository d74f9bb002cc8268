package cove

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"connectrpc.com/connect"

	pb "github.com/cove-dev/cove/sdk/gen/process"
)

// Commands runs commands in a sandbox, in the foreground (Run) or the background (Start).
// A command is not its stream: ending the stream (Disconnect, a cancelled context) leaves
// the process running, and Connect attaches to it again.
type Commands struct{ e *envd }

// CommandResult is how a command ended.
type CommandResult struct {
	PID      uint32
	ExitCode int
	Status   string // envd's description: "exit status 0", "signal: killed"
	Error    string // envd's error text, if any
	Stdout   string
	Stderr   string

	requestID string
}

// RequestID returns the request id of the stream that started or connected to the
// command: the id envd logged its stream and process lines under.
func (r *CommandResult) RequestID() string { return r.requestID }

// ProcessInfo describes a running process, as List returns it.
type ProcessInfo struct {
	PID  uint32
	Tag  string
	Cmd  string
	Args []string
	Envs map[string]string
	Cwd  string
}

// The RPC methods of the process streams, as envd logs them.
const (
	methodStart   = "process.Process/Start"
	methodConnect = "process.Process/Connect"
)

// Run runs cmd with bash (`bash -l -c cmd`) and waits for it to end. A command that exits
// with a code other than 0 returns its result and a *CommandExitError.
//
// Options: OnStdout, OnStderr, Envs, Cwd, User, Timeout (DefaultCommandTimeout unless
// given), Stdin, Tag.
func (c *Commands) Run(ctx context.Context, cmd string, opts ...Option) (*CommandResult, error) {
	h, err := c.Start(ctx, cmd, opts...)
	if err != nil {
		return nil, err
	}
	return h.Wait(ctx)
}

// Start starts cmd in the background and returns once it runs. The command's stream lives
// as long as ctx: cancelling ctx, or Disconnect, ends the stream but not the process.
// Options as for Run.
func (c *Commands) Start(ctx context.Context, cmd string, opts ...Option) (*CommandHandle, error) {
	o := apply(opts)
	stdin := o.stdin
	req := &pb.StartRequest{
		Process: &pb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", cmd}, Envs: o.envs},
		Stdin:   &stdin,
	}
	if o.cwd != "" {
		req.Process.Cwd = &o.cwd
	}
	if o.tag != "" {
		req.Tag = &o.tag
	}
	return c.e.start(ctx, req, o)
}

// Connect attaches to a running process by pid and streams its output from now on.
// Options: OnStdout, OnStderr, OnPTYData, Timeout (none unless given).
func (c *Commands) Connect(ctx context.Context, pid uint32, opts ...Option) (*CommandHandle, error) {
	o := apply(opts)
	if !o.timeoutSet {
		o.timeoutSet, o.timeout = true, 0
	}
	return c.e.openStream(ctx, methodConnect, o, func(ctx context.Context) (eventStream, error) {
		req := connect.NewRequest(&pb.ConnectRequest{Process: pidSelector(pid)})
		req.Header().Set(headerKeepalive, keepaliveSeconds)
		s, err := c.e.proc.Connect(ctx, req)
		if err != nil {
			return nil, err
		}
		return connectStream{s}, nil
	})
}

// List lists the sandbox's running processes.
func (c *Commands) List(ctx context.Context) ([]ProcessInfo, error) {
	resp, _, err := unary(ctx, c.e, "list processes", "", func(ctx context.Context) (*connect.Response[pb.ListResponse], error) {
		return c.e.proc.List(ctx, connect.NewRequest(&pb.ListRequest{}))
	})
	if err != nil {
		return nil, err
	}
	var out []ProcessInfo
	for _, p := range resp.Msg.GetProcesses() {
		cfg := p.GetConfig()
		out = append(out, ProcessInfo{PID: p.GetPid(), Tag: p.GetTag(), Cmd: cfg.GetCmd(), Args: cfg.GetArgs(), Envs: cfg.GetEnvs(), Cwd: cfg.GetCwd()})
	}
	return out, nil
}

// SendStdin writes data to the stdin of a process started with the Stdin option.
func (c *Commands) SendStdin(ctx context.Context, pid uint32, data string) error {
	return c.e.sendInput(ctx, pid, &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte(data)}})
}

// CloseStdin closes a process's stdin, so it reads EOF.
func (c *Commands) CloseStdin(ctx context.Context, pid uint32) error {
	_, _, err := unary(ctx, c.e, "close stdin", "", func(ctx context.Context) (*connect.Response[pb.CloseStdinResponse], error) {
		return c.e.proc.CloseStdin(ctx, connect.NewRequest(&pb.CloseStdinRequest{Process: pidSelector(pid)}))
	})
	return err
}

// Kill sends SIGKILL to a process and everything it started. A process that is gone is
// ErrNotFound.
func (c *Commands) Kill(ctx context.Context, pid uint32) error {
	return c.e.signal(ctx, pid, pb.Signal_SIGNAL_SIGKILL)
}

func (e *envd) sendInput(ctx context.Context, pid uint32, in *pb.ProcessInput) error {
	_, _, err := unary(ctx, e, "send input", "", func(ctx context.Context) (*connect.Response[pb.SendInputResponse], error) {
		return e.proc.SendInput(ctx, connect.NewRequest(&pb.SendInputRequest{Process: pidSelector(pid), Input: in}))
	})
	return err
}

func (e *envd) signal(ctx context.Context, pid uint32, sig pb.Signal) error {
	_, _, err := unary(ctx, e, "kill process "+strconv.FormatUint(uint64(pid), 10), "", func(ctx context.Context) (*connect.Response[pb.SendSignalResponse], error) {
		return e.proc.SendSignal(ctx, connect.NewRequest(&pb.SendSignalRequest{Process: pidSelector(pid), Signal: sig}))
	})
	return err
}

func pidSelector(pid uint32) *pb.ProcessSelector {
	return &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}
}

// keepaliveSeconds asks envd for a keepalive every 50 s, as the E2B SDKs do.
const keepaliveSeconds = "50"

// start opens a Start stream for req.
func (e *envd) start(ctx context.Context, req *pb.StartRequest, o *options) (*CommandHandle, error) {
	return e.openStream(ctx, methodStart, o, func(ctx context.Context) (eventStream, error) {
		r := connect.NewRequest(req)
		r.Header().Set(headerKeepalive, keepaliveSeconds)
		s, err := e.proc.Start(ctx, r)
		if err != nil {
			return nil, err
		}
		return startStream{s}, nil
	})
}

// eventStream is a Start or Connect stream.
type eventStream interface {
	Receive() bool
	Err() error
	Close() error
	Event() *pb.ProcessEvent
}

type startStream struct {
	*connect.ServerStreamForClient[pb.StartResponse]
}

func (s startStream) Event() *pb.ProcessEvent { return s.Msg().GetEvent() }

type connectStream struct {
	*connect.ServerStreamForClient[pb.ConnectResponse]
}

func (s connectStream) Event() *pb.ProcessEvent { return s.Msg().GetEvent() }

// CommandHandle is a command running in the background: its output so far, a way to wait
// for its end, to kill it, or to let go of it and leave it running.
type CommandHandle struct {
	e         *envd
	method    string
	requestID string
	cancel    context.CancelCauseFunc
	started   chan struct{}
	done      chan struct{}

	mu     sync.Mutex
	pid    uint32
	stdout strings.Builder
	stderr strings.Builder
	result *CommandResult
	err    error
}

// PID returns the process id in the sandbox.
func (h *CommandHandle) PID() uint32 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.pid
}

// RequestID returns the request id of the stream that started or connected to the command.
func (h *CommandHandle) RequestID() string { return h.requestID }

// Stdout returns the stdout received so far.
func (h *CommandHandle) Stdout() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stdout.String()
}

// Stderr returns the stderr received so far.
func (h *CommandHandle) Stderr() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stderr.String()
}

// Done is closed when the stream has ended, with the command or without it.
func (h *CommandHandle) Done() <-chan struct{} { return h.done }

// Wait waits for the command to end and returns its result: with a *CommandExitError when
// it exited with a code other than 0. When the stream ended first (Disconnect, a cancelled
// context, a transport failure) it returns the stream's error. When ctx ends first, Wait
// returns ctx's cause; the stream goes on.
func (h *CommandHandle) Wait(ctx context.Context) (*CommandResult, error) {
	select {
	case <-h.done:
	case <-ctx.Done():
		return nil, &Error{Op: "wait for process " + strconv.FormatUint(uint64(h.PID()), 10), SandboxID: h.e.sandboxID,
			Message: context.Cause(ctx).Error(), RequestID: h.requestID, Err: context.Cause(ctx)}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.result, h.err
}

// Disconnect ends the stream and leaves the process running; Commands.Connect attaches to
// it again. The stream ends with the cause ErrDisconnect, which Wait returns. Disconnect
// returns once the stream has ended.
func (h *CommandHandle) Disconnect() {
	h.cancel(ErrDisconnect)
	<-h.done
}

// Kill sends SIGKILL to the command and everything it started; the stream then ends with
// the command's end.
func (h *CommandHandle) Kill(ctx context.Context) error {
	return h.e.signal(ctx, h.PID(), pb.Signal_SIGNAL_SIGKILL)
}

// SendStdin writes data to the command's stdin (it must have been started with Stdin).
func (h *CommandHandle) SendStdin(ctx context.Context, data string) error {
	return h.e.sendInput(ctx, h.PID(), &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte(data)}})
}

// CloseStdin closes the command's stdin.
func (h *CommandHandle) CloseStdin(ctx context.Context) error {
	return (&Commands{e: h.e}).CloseStdin(ctx, h.PID())
}

// openStream opens a process stream and returns once its start event arrived (or the
// stream ended first, with its error).
func (e *envd) openStream(ctx context.Context, method string, o *options, open func(context.Context) (eventStream, error)) (*CommandHandle, error) {
	callCtx, ci := newCall(ctx, o.user)
	cancelTimeout := context.CancelFunc(func() {})
	if d := o.commandTimeout(); d > 0 {
		callCtx, cancelTimeout = context.WithTimeoutCause(callCtx, d, fmt.Errorf("%w: the command's timeout of %s passed", ErrTimeout, d))
	}
	sctx, cancel := context.WithCancelCause(callCtx)
	h := &CommandHandle{
		e: e, method: method, requestID: ci.requestID, cancel: cancel,
		started: make(chan struct{}), done: make(chan struct{}),
	}
	s := &streamRun{h: h, ci: ci, ctx: sctx, logCtx: ctx, o: o}
	go func() {
		defer cancelTimeout()
		defer cancel(nil)
		s.run(open)
	}()
	select {
	case <-h.started:
		return h, nil
	case <-h.done:
		return nil, h.err
	}
}

// streamRun reads one process stream to its end.
type streamRun struct {
	h      *CommandHandle
	ci     *callInfo
	ctx    context.Context // the stream's: cancelled by Disconnect, the caller or the timeout
	logCtx context.Context
	o      *options
	begun  bool
	bytes  int64
}

func (s *streamRun) run(open func(context.Context) (eventStream, error)) {
	h := s.h
	defer close(h.done)
	var end *pb.ProcessEvent_EndEvent
	stream, err := open(s.ctx)
	if err == nil {
		defer stream.Close()
		for stream.Receive() {
			ev := stream.Event()
			switch {
			case ev.GetStart() != nil:
				h.mu.Lock()
				h.pid = ev.GetStart().GetPid()
				h.mu.Unlock()
				if !s.begun {
					s.begun = true
					close(h.started)
				}
			case ev.GetData() != nil:
				s.data(ev.GetData())
			case ev.GetEnd() != nil:
				end = ev.GetEnd()
			}
		}
		err = stream.Err()
	}
	if end == nil {
		err = s.cancelled(err)
		h.mu.Lock()
		h.err = err
		h.mu.Unlock()
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	{
		h.result = &CommandResult{
			PID: h.pid, ExitCode: int(end.GetExitCode()), Status: end.GetStatus(), Error: end.GetError(),
			Stdout: h.stdout.String(), Stderr: h.stderr.String(), requestID: h.requestID,
		}
		if !end.GetExited() || end.GetExitCode() != 0 {
			h.err = &CommandExitError{
				PID: h.pid, ExitCode: int(end.GetExitCode()), Status: end.GetStatus(), Message: end.GetError(),
				Stdout: h.result.Stdout, Stderr: h.result.Stderr, RequestID: h.requestID,
			}
		}
	}
}

func (s *streamRun) data(d *pb.ProcessEvent_DataEvent) {
	h := s.h
	switch out := d.GetOutput().(type) {
	case *pb.ProcessEvent_DataEvent_Stdout:
		s.bytes += int64(len(out.Stdout))
		h.mu.Lock()
		h.stdout.Write(out.Stdout)
		h.mu.Unlock()
		if s.o.onStdout != nil {
			s.o.onStdout(string(out.Stdout))
		}
	case *pb.ProcessEvent_DataEvent_Stderr:
		s.bytes += int64(len(out.Stderr))
		h.mu.Lock()
		h.stderr.Write(out.Stderr)
		h.mu.Unlock()
		if s.o.onStderr != nil {
			s.o.onStderr(string(out.Stderr))
		}
	case *pb.ProcessEvent_DataEvent_Pty:
		s.bytes += int64(len(out.Pty))
		if s.o.onData != nil {
			s.o.onData(out.Pty)
		}
	}
}
