// Package process is envd's process service: it starts processes in the sandbox, streams
// their output, and takes their input and signals, wire-compatible with E2B's envd.
//
// The one idea: a process is not its stream. Each process has a record that outlives every
// stream attached to it; streams subscribe to it, and each stream's end is logged once, with
// how it ended (completed, client_cancel, deadline, server_error, rejected) and in which
// phase, beside the request id the client sent.
package process

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"github.com/creack/pty"

	"github.com/cove-dev/cove/internal/guest/envd/fault"
	"github.com/cove-dev/cove/internal/guest/envd/identity"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	pb "github.com/cove-dev/cove/sdk/gen/process"
	"github.com/cove-dev/cove/sdk/gen/process/processconnect"
	"github.com/cove-dev/cove/sdk/reason"
)

// Options configure a Service.
type Options struct {
	// KeepEnded is how long an exited process's end event stays available to Connect.
	KeepEnded time.Duration
	// Reap makes the service reap every child, orphans included: set it when envd is PID 1
	// or a subreaper.
	Reap bool
	// Sink, when set, receives every process's output lines and command records.
	Sink *Sink
	// Expired, when set, is called after kept end events expired: work the service did on
	// its own, between requests.
	Expired func()
	// Logger logs what the service does on its own (the guest OOM killer's kills).
	Logger *slog.Logger
}

// Service implements processconnect.ProcessHandler.
type Service struct {
	defaults  *identity.Defaults
	table     *table
	reaper    *reaper
	keepEnded time.Duration
	sink      *Sink
}

var _ processconnect.ProcessHandler = (*Service)(nil)

// New returns a process service using the sandbox defaults d.
func New(d *identity.Defaults, opts Options) *Service {
	if opts.KeepEnded <= 0 {
		opts.KeepEnded = 30 * time.Second
	}
	t := newTable()
	t.expired = opts.Expired
	if opts.Reap {
		if opts.Logger == nil {
			opts.Logger = telemetry.Logger(context.Background())
		}
		startGuestOOMKiller(opts.Logger, opts.Sink)
	}
	return &Service{defaults: d, table: t, reaper: newReaper(opts.Reap), keepEnded: opts.KeepEnded, sink: opts.Sink}
}

// HeaderKeepalive is the client's keepalive interval in seconds for server streams.
const HeaderKeepalive = "Keepalive-Ping-Interval"

const defaultKeepalive = 90 * time.Second

func keepaliveInterval(h interface{ Get(string) string }) time.Duration {
	if n, err := strconv.Atoi(h.Get(HeaderKeepalive)); err == nil && n > 0 {
		return time.Duration(n) * time.Second
	}
	return defaultKeepalive
}

// Start starts a process and streams its events until it ends or the client leaves.
func (s *Service) Start(ctx context.Context, req *connect.Request[pb.StartRequest], stream *connect.ServerStream[pb.StartResponse]) error {
	st := newStreamLog("process.Process/Start")
	defer st.write(ctx)

	u, err := s.defaults.FromBasicAuth(req.Header())
	if err != nil {
		return st.failed(ctx, err)
	}
	sub := newSubscriber(ctx.Done())
	p, err := s.spawn(ctx, req.Msg, u, sub)
	if err != nil {
		return st.failed(ctx, err)
	}
	st.pid = p.pid
	startSent := false
	send := func(ev *pb.ProcessEvent) error {
		err := stream.Send(&pb.StartResponse{Event: ev})
		if !startSent { // the start event: follow sends it first
			startSent = true
			s.preferForOOM(p)
		}
		return err
	}
	return s.follow(ctx, p, sub, send, keepaliveInterval(req.Header()), st, true)
}

// Connect attaches to a running process (or one that ended moments ago) by pid or tag.
func (s *Service) Connect(ctx context.Context, req *connect.Request[pb.ConnectRequest], stream *connect.ServerStream[pb.ConnectResponse]) error {
	st := newStreamLog("process.Process/Connect")
	defer st.write(ctx)

	p, err := s.table.find(req.Msg.GetProcess())
	if err != nil {
		return st.failed(ctx, err)
	}
	st.pid = p.pid
	send := func(ev *pb.ProcessEvent) error { return stream.Send(&pb.ConnectResponse{Event: ev}) }
	sub := newSubscriber(ctx.Done())
	if end := p.subscribe(sub); end != nil {
		// Already ended: the start and the kept end event, nothing between.
		sub.ch <- single(end)
	}
	return s.follow(ctx, p, sub, send, keepaliveInterval(req.Header()), st, false)
}

// follow sends the start event, then every event of p until its end, keepalives between,
// and ends the stream as the client or the deadline decides. A deadline on the Start stream
// kills the process: Connect-Timeout-Ms bounds the command, as in E2B.
func (s *Service) follow(ctx context.Context, p *proc, sub *subscriber, send func(*pb.ProcessEvent) error, keepalive time.Duration, st *streamLog, killOnDeadline bool) error {
	defer p.unsubscribe(sub)
	if err := send(&pb.ProcessEvent{Event: &pb.ProcessEvent_Start{Start: &pb.ProcessEvent_StartEvent{Pid: uint32(p.pid)}}}); err != nil {
		return st.sendFailed(ctx, p, err, killOnDeadline, s)
	}
	st.startSent = true
	tick := time.NewTicker(keepalive)
	defer tick.Stop()
	keep := &pb.ProcessEvent{Event: &pb.ProcessEvent_Keepalive{Keepalive: &pb.ProcessEvent_KeepAlive{}}}
	gate := gateFrom(ctx)
	defer gate.release()
	for {
		select {
		case b := <-sub.ch:
			evs := b.evs
			for i, ev := range evs {
				// Hold connect's flush while more is queued; the last event of a burst flushes.
				// The end event is held too: the end of the stream follows at once, and the
				// gate passes both on in one write when the handler returns.
				end := ev.GetEnd() != nil
				gate.setHold(end || i < len(evs)-1 || len(sub.ch) > 0)
				if err := send(ev); err != nil {
					return st.sendFailed(ctx, p, err, killOnDeadline, s)
				}
				if d := ev.GetData(); d != nil {
					st.bytes += int64(len(d.GetStdout()) + len(d.GetStderr()) + len(d.GetPty()))
				}
				if end {
					st.procEnded = true
					st.end = reason.StreamCompleted
					gate.finish()
					return nil
				}
			}
			b.release() // sent: the read buffer may be reused
			gate.release()
		case <-tick.C:
			if err := send(keep); err != nil {
				return st.sendFailed(ctx, p, err, killOnDeadline, s)
			}
		case <-ctx.Done():
			return st.cancelled(ctx, p, killOnDeadline, s)
		}
	}
}

// List lists the running processes.
func (s *Service) List(ctx context.Context, _ *connect.Request[pb.ListRequest]) (*connect.Response[pb.ListResponse], error) {
	out := &pb.ListResponse{}
	for _, p := range s.table.running() {
		info := &pb.ProcessInfo{Config: p.config, Pid: uint32(p.pid)}
		if p.tag != "" {
			tag := p.tag
			info.Tag = &tag
		}
		out.Processes = append(out.Processes, info)
	}
	return connect.NewResponse(out), nil
}

// SendInput writes one chunk to a process's stdin or PTY.
func (s *Service) SendInput(ctx context.Context, req *connect.Request[pb.SendInputRequest]) (*connect.Response[pb.SendInputResponse], error) {
	p, err := s.table.findRunning(req.Msg.GetProcess())
	if err != nil {
		return nil, fault.Connect(ctx, err)
	}
	if err := writeInput(p, req.Msg.GetInput()); err != nil {
		return nil, fault.Connect(ctx, err)
	}
	return connect.NewResponse(&pb.SendInputResponse{}), nil
}

// StreamInput writes a client stream of chunks, in order, to one process.
func (s *Service) StreamInput(ctx context.Context, stream *connect.ClientStream[pb.StreamInputRequest]) (*connect.Response[pb.StreamInputResponse], error) {
	var p *proc
	for stream.Receive() {
		switch ev := stream.Msg().GetEvent().(type) {
		case *pb.StreamInputRequest_Start:
			found, err := s.table.findRunning(ev.Start.GetProcess())
			if err != nil {
				return nil, fault.Connect(ctx, err)
			}
			p = found
		case *pb.StreamInputRequest_Data:
			if p == nil {
				return nil, fault.Connect(ctx, fmt.Errorf("%w: the first StreamInput message must be start", fault.ErrInvalid))
			}
			if err := writeInput(p, ev.Data.GetInput()); err != nil {
				return nil, fault.Connect(ctx, err)
			}
		}
	}
	if err := stream.Err(); err != nil {
		return nil, fault.Connect(ctx, err)
	}
	return connect.NewResponse(&pb.StreamInputResponse{}), nil
}

func writeInput(p *proc, in *pb.ProcessInput) error {
	switch v := in.GetInput().(type) {
	case *pb.ProcessInput_Stdin:
		if p.pty != nil {
			return fmt.Errorf("%w: process %d has a PTY: send input as pty", fault.ErrFailedPrecond, p.pid)
		}
		if err := p.writeStdin(v.Stdin); err != nil {
			if errors.Is(err, errStdinClosed) {
				return fmt.Errorf("%w: process %d: %v", fault.ErrFailedPrecond, p.pid, err)
			}
			return fmt.Errorf("write stdin of %d: %w", p.pid, err)
		}
		return nil
	case *pb.ProcessInput_Pty:
		if p.pty == nil {
			return fmt.Errorf("%w: process %d has no PTY: send input as stdin", fault.ErrFailedPrecond, p.pid)
		}
		if _, err := p.pty.Write(v.Pty); err != nil {
			return fmt.Errorf("write pty of %d: %w", p.pid, err)
		}
		return nil
	}
	return fmt.Errorf("%w: input must be stdin or pty", fault.ErrInvalid)
}

// CloseStdin closes a process's stdin pipe so it reads EOF.
func (s *Service) CloseStdin(ctx context.Context, req *connect.Request[pb.CloseStdinRequest]) (*connect.Response[pb.CloseStdinResponse], error) {
	p, err := s.table.findRunning(req.Msg.GetProcess())
	if err != nil {
		return nil, fault.Connect(ctx, err)
	}
	if p.pty != nil {
		return nil, fault.Connect(ctx, fmt.Errorf("%w: process %d has a PTY: send Ctrl-D (0x04) instead", fault.ErrFailedPrecond, p.pid))
	}
	if p.stdin == nil {
		return nil, fault.Connect(ctx, fmt.Errorf("%w: process %d was started without stdin", fault.ErrFailedPrecond, p.pid))
	}
	p.closeStdin()
	return connect.NewResponse(&pb.CloseStdinResponse{}), nil
}

// SendSignal sends SIGTERM or SIGKILL to a process and everything it started.
func (s *Service) SendSignal(ctx context.Context, req *connect.Request[pb.SendSignalRequest]) (*connect.Response[pb.SendSignalResponse], error) {
	var sig syscall.Signal
	switch req.Msg.GetSignal() {
	case pb.Signal_SIGNAL_SIGKILL:
		sig = syscall.SIGKILL
	case pb.Signal_SIGNAL_SIGTERM:
		sig = syscall.SIGTERM
	default:
		return nil, fault.Connect(ctx, fmt.Errorf("%w: signal must be SIGTERM or SIGKILL", fault.ErrInvalid))
	}
	p, err := s.table.findRunning(req.Msg.GetProcess())
	if err != nil {
		return nil, fault.Connect(ctx, err)
	}
	if err := s.signal(p, sig, telemetry.RequestID(ctx), "killed"); err != nil {
		return nil, fault.Connect(ctx, err)
	}
	telemetry.Logger(ctx).Info("process signalled", telemetry.KeyPID, p.pid, telemetry.KeySignal, sigName(sig))
	return connect.NewResponse(&pb.SendSignalResponse{}), nil
}

// signal delivers sig to p's process group (its own group, or its PTY session), falling back
// to the process alone, and remembers who sent it.
func (s *Service) signal(p *proc, sig syscall.Signal, requestID, cause string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.endEvent != nil {
		return fmt.Errorf("%w: process %d has exited", fault.ErrNotFound, p.pid)
	}
	p.signal.requestID, p.signal.name, p.signal.cause = requestID, sigName(sig), cause
	if err := syscall.Kill(-p.pid, sig); err == nil {
		if sig == syscall.SIGKILL {
			go killGroupUntilGone(p.pid)
		}
		return nil
	}
	if err := syscall.Kill(p.pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal %d: %w", p.pid, err)
	}
	return nil
}

// killGroupUntilGone kills process group pgid again until none of it is left (killGroupFor
// at most). Linux fails a fork under a pending SIGKILL, so one kill of a group ends it; gVisor
// lets a child forked as the kill goes out through, and a fork bomb's survivors grow the
// group back: kills repeated until the group is gone (its members reaped) catch them.
func killGroupUntilGone(pgid int) {
	deadline := time.Now().Add(killGroupFor)
	for wait := time.Millisecond; time.Now().Before(deadline); wait = min(2*wait, 50*time.Millisecond) {
		time.Sleep(wait)
		if err := syscall.Kill(-pgid, syscall.SIGKILL); errors.Is(err, syscall.ESRCH) {
			return
		}
	}
}

// killGroupFor bounds killGroupUntilGone.
const killGroupFor = 10 * time.Second

func sigName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGKILL:
		return "SIGKILL"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return sig.String()
}

// Update resizes a process's PTY.
func (s *Service) Update(ctx context.Context, req *connect.Request[pb.UpdateRequest]) (*connect.Response[pb.UpdateResponse], error) {
	p, err := s.table.findRunning(req.Msg.GetProcess())
	if err != nil {
		return nil, fault.Connect(ctx, err)
	}
	if req.Msg.Pty == nil {
		return connect.NewResponse(&pb.UpdateResponse{}), nil
	}
	if p.pty == nil {
		return nil, fault.Connect(ctx, fmt.Errorf("%w: process %d has no PTY to resize", fault.ErrFailedPrecond, p.pid))
	}
	size := req.Msg.GetPty().GetSize()
	if size.GetCols() == 0 || size.GetRows() == 0 || size.GetCols() > 65535 || size.GetRows() > 65535 {
		return nil, fault.Connect(ctx, fmt.Errorf("%w: pty size must be 1..65535 columns and rows", fault.ErrInvalid))
	}
	if err := pty.Setsize(p.pty, &pty.Winsize{Cols: uint16(size.GetCols()), Rows: uint16(size.GetRows())}); err != nil {
		return nil, fault.Connect(ctx, fmt.Errorf("resize pty of %d: %w", p.pid, err))
	}
	return connect.NewResponse(&pb.UpdateResponse{}), nil
}

// streamLog gathers the facts of one stream for its single end line.
type streamLog struct {
	method    string
	begun     time.Time
	pid       int
	startSent bool
	procEnded bool
	bytes     int64
	end       reason.StreamEnd
	code      connect.Code // 0 when the stream ended without error
	err       error
}

func newStreamLog(method string) *streamLog {
	return &streamLog{method: method, begun: time.Now(), end: reason.StreamServerError}
}

func (st *streamLog) failed(ctx context.Context, err error) error {
	st.err = err
	st.code = fault.Code(err)
	switch st.code {
	case connect.CodeInternal, connect.CodeUnknown, connect.CodeDataLoss, connect.CodeUnavailable:
		st.end = reason.StreamServerError
	default:
		st.end = reason.StreamRejected
	}
	return fault.Connect(ctx, err)
}

// sendFailed classifies a failed write to the client: the client left, or its deadline passed.
func (st *streamLog) sendFailed(ctx context.Context, p *proc, err error, killOnDeadline bool, s *Service) error {
	if st.deadlineReached(ctx) {
		return st.cancelled(ctx, p, killOnDeadline, s)
	}
	st.procEnded = p.ended()
	st.err = err
	st.end, st.code = reason.StreamClientCancel, connect.CodeCanceled
	return fault.Connect(ctx, connect.NewError(st.code, err))
}

// deadlineReached reports whether ctx ended because of its deadline. A client whose own
// deadline passes hangs up at that moment, a little before envd's copy of the deadline
// (started on receipt) fires, so a cancel that close to the deadline is the deadline too.
func (st *streamLog) deadlineReached(ctx context.Context) bool {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return true
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		return false
	}
	margin := min(max(deadline.Sub(st.begun)/10, 20*time.Millisecond), 250*time.Millisecond)
	return time.Until(deadline) <= margin
}

func (st *streamLog) cancelled(ctx context.Context, p *proc, killOnDeadline bool, s *Service) error {
	st.procEnded = p.ended()
	if st.deadlineReached(ctx) {
		st.end, st.code = reason.StreamDeadline, connect.CodeDeadlineExceeded
		msg := "stream deadline (Connect-Timeout-Ms) passed"
		if killOnDeadline && !st.procEnded {
			_ = s.signal(p, syscall.SIGKILL, telemetry.RequestID(ctx), "timeout")
			msg = fmt.Sprintf("process %d killed: its deadline (Connect-Timeout-Ms) passed", p.pid)
		}
		st.err = errors.New(msg)
		return fault.Connect(ctx, connect.NewError(st.code, st.err))
	}
	st.end, st.code = reason.StreamClientCancel, connect.CodeCanceled
	st.err = context.Cause(ctx)
	return fault.Connect(ctx, connect.NewError(st.code, st.err))
}

func (st *streamLog) phase() reason.StreamPhase {
	switch {
	case !st.startSent:
		return reason.PhaseBeforeStart
	case st.procEnded:
		return reason.PhaseAfterExit
	}
	return reason.PhaseStreaming
}

// write logs the stream's one end line at the level its end deserves.
func (st *streamLog) write(ctx context.Context) {
	level := slog.LevelInfo
	switch st.end {
	case reason.StreamDeadline, reason.StreamRejected:
		level = slog.LevelWarn
	case reason.StreamServerError:
		level = slog.LevelError
	}
	logger := telemetry.Logger(ctx)
	if !logger.Enabled(ctx, level) {
		return
	}
	code := "ok"
	if st.code != 0 {
		code = st.code.String()
	}
	attrs := []slog.Attr{
		slog.String(telemetry.KeyRPCMethod, st.method),
		slog.Int(telemetry.KeyPID, st.pid),
		slog.String(telemetry.KeyStreamEnd, st.end.String()),
		slog.String(telemetry.KeyStreamPhase, st.phase().String()),
		slog.String(telemetry.KeyConnectCode, code),
		slog.Int64(telemetry.KeyStreamBytesSent, st.bytes),
		slog.Float64(telemetry.KeyDurationMS, float64(time.Since(st.begun).Microseconds())/1000),
	}
	if st.err != nil {
		attrs = append(attrs, slog.String(telemetry.KeyError, st.err.Error()))
	}
	logger.LogAttrs(ctx, level, "stream end", attrs...)
}
