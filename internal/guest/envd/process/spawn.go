package process

import (
	"context"
	"encoding/base64"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/internal/guest/envd/fault"
	"github.com/cove-dev/cove/internal/guest/envd/identity"
	"github.com/cove-dev/cove/internal/observe/redact"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/sdk/envdapi"
	pb "github.com/cove-dev/cove/sdk/gen/process"
	"github.com/cove-dev/cove/sdk/reason"
)

const defaultPATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// oomScoreAdj is what envd, as a sandbox's init, gives every process it starts: the most,
// so that the OOM killer takes any command (the largest first) before envd, whatever memory
// the sandbox holds outside processes (page cache, tmpfs, pipe buffers).
const oomScoreAdj = "1000"

// pipeSize is the kernel buffer an output pipe grows to once a read finds it full: fewer
// wake-ups at high volume. Pipes start at the kernel's default, as most commands print little.
const pipeSize = 1 << 20

// spawn starts the process a StartRequest describes, with sub already attached so that no
// output is lost, and registers it in the table.
func (s *Service) spawn(ctx context.Context, req *pb.StartRequest, u *identity.User, sub *subscriber) (*proc, error) {
	cfg := req.GetProcess()
	if cfg == nil || cfg.GetCmd() == "" {
		return nil, fmt.Errorf("%w: process.cmd is required", fault.ErrInvalid)
	}
	defaults := s.defaults.Get()

	env := buildEnv(u, defaults.EnvVars, cfg.GetEnvs())
	path, err := lookPath(cfg.GetCmd(), env)
	if err != nil {
		return nil, err
	}
	cwd, err := workdir(u, cfg.Cwd, defaults.Workdir)
	if err != nil {
		return nil, err
	}

	cmd := exec.Command(path, cfg.GetArgs()...)
	cmd.Args[0] = cfg.GetCmd()
	cmd.Env = env
	cmd.Dir = cwd
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	if !u.IsSelf() {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(u.UID), Gid: uint32(u.GID), Groups: u.Groups}
	}

	p := &proc{
		tag:       req.GetTag(),
		config:    cfg,
		user:      u.Name,
		requestID: telemetry.RequestID(ctx),
		subs:      map[*subscriber]struct{}{sub: {}},
		done:      make(chan struct{}),
		oomBefore: -1,
	}
	if req.Tag != nil && !s.table.reserveTag(p.tag) {
		return nil, fmt.Errorf("%w: a running process already has tag %q", fault.ErrExists, p.tag)
	}

	var childEnds []*os.File
	pidfd := -1
	// The pidfd to watch the exit with (in PID 1 mode beside SIGCHLD); the reaper closes it.
	cmd.SysProcAttr.PidFD = &pidfd
	startFn := func() (int, int, error) { // runs under the reaper's lock in PID 1 mode
		if err := cmd.Start(); err != nil {
			return 0, -1, err
		}
		return cmd.Process.Pid, pidfd, nil
	}
	if size := req.GetPty().GetSize(); req.Pty != nil {
		ws := &pty.Winsize{Cols: uint16(size.GetCols()), Rows: uint16(size.GetRows())}
		if ws.Cols == 0 || ws.Rows == 0 {
			ws.Cols, ws.Rows = 80, 24
		}
		startFn = func() (int, int, error) {
			f, err := pty.StartWithSize(cmd, ws)
			if err != nil {
				return 0, -1, err
			}
			p.pty = f
			p.outs = []*os.File{f}
			return cmd.Process.Pid, pidfd, nil
		}
	} else {
		cmd.SysProcAttr.Setpgid = true // signals reach the whole tree the command started
		stdoutR, stdoutW, err := pipe(0)
		if err != nil {
			return nil, s.unreserve(p, err)
		}
		stderrR, stderrW, err := pipe(0)
		if err != nil {
			closeAll(stdoutR, stdoutW)
			return nil, s.unreserve(p, err)
		}
		cmd.Stdout, cmd.Stderr = stdoutW, stderrW
		p.outs = []*os.File{stdoutR, stderrR}
		childEnds = []*os.File{stdoutW, stderrW}
		if req.Stdin == nil || req.GetStdin() {
			stdinW, stdinR, err := pipe(1)
			if err != nil {
				closeAll(stdoutR, stdoutW, stderrR, stderrW)
				return nil, s.unreserve(p, err)
			}
			cmd.Stdin = stdinR
			p.stdin = stdinW
			childEnds = append(childEnds, stdinR)
		} else if devNull, err := devNullFile(); err == nil {
			cmd.Stdin = devNull // what exec would open for a nil Stdin, opened once
		}
	}

	p.pumpsLeft = len(p.outs) // set before the exit can be reported, which waits for them
	if req.Pty != nil {
		p.pumpsLeft = 1
	}
	pid, err := s.reaper.start(startFn, p.exited)
	closeAll(childEnds...)
	if err != nil {
		closeAll(p.outs...)
		closeAll(p.stdin)
		return nil, s.unreserve(p, fmt.Errorf("start %s: %w", cfg.GetCmd(), startError(err)))
	}
	p.pid = pid
	p.started = time.Now()
	_ = cmd.Process.Release() // the reaper owns the wait
	s.table.add(p)

	logger := telemetry.Logger(ctx)
	if logger.Enabled(ctx, slog.LevelInfo) {
		logStart(logger, p, cfg, u, cwd)
	}

	var outCap, errCap *capture
	if s.sink != nil {
		first := "stdout"
		if p.pty != nil {
			first = "pty"
		}
		outCap, errCap = &capture{sink: s.sink, p: p, stream: first}, &capture{sink: s.sink, p: p, stream: "stderr"}
		p.caps = []*capture{outCap, errCap}
		s.sink.emit(envdapi.CommandStart{Kind: envdapi.KindCommandStart, PID: p.pid, Tag: p.tag, RequestID: p.requestID, User: u.Name,
			Command: cfg.GetCmd(), Args: cfg.GetArgs(), Cwd: cwd, StartedAt: p.started, Secrets: envSecrets(cfg.GetEnvs())})
	}
	p.onEnd = func(ex exit) {
		if logger.Enabled(context.Background(), slog.LevelInfo) {
			s.logProcessEnd(logger, p, ex)
		}
		if s.sink != nil {
			s.sink.emit(p.commandEnd(ex, s.sink))
		}
		s.table.retire(p, s.keepEnded)
	}
	if p.pty != nil {
		go p.pump(p.pty, func(b []byte) *pb.ProcessEvent_DataEvent {
			return &pb.ProcessEvent_DataEvent{Output: &pb.ProcessEvent_DataEvent_Pty{Pty: b}}
		}, &p.stdoutBytes, outCap)
	} else {
		go p.pump(p.outs[0], func(b []byte) *pb.ProcessEvent_DataEvent {
			return &pb.ProcessEvent_DataEvent{Output: &pb.ProcessEvent_DataEvent_Stdout{Stdout: b}}
		}, &p.stdoutBytes, outCap)
		go p.pump(p.outs[1], func(b []byte) *pb.ProcessEvent_DataEvent {
			return &pb.ProcessEvent_DataEvent{Output: &pb.ProcessEvent_DataEvent_Stderr{Stderr: b}}
		}, &p.stderrBytes, errCap)
	}
	return p, nil
}

// commandEnd builds the process's command record; the pumps have finished, so the captures
// are no longer written.
func (p *proc) commandEnd(ex exit, sink *Sink) envdapi.CommandEnd {
	now := time.Now()
	rec := envdapi.CommandEnd{Kind: envdapi.KindCommandEnd, PID: p.pid, Tag: p.tag, RequestID: p.requestID,
		StartedAt: p.started, EndedAt: now, DurationMS: now.Sub(p.started).Milliseconds(),
		StdoutBytes: p.stdoutBytes.Load(), StderrBytes: p.stderrBytes.Load(),
		HeadBytes: sink.headBytes(), TailBytes: sink.tailBytes(), EndCause: reason.EndExited}
	if ex.Exited {
		code := ex.Code
		rec.ExitCode = &code
	} else {
		rec.Signal = unix.SignalName(ex.Signal)
		p.mu.Lock()
		rec.EndCause, rec.SignalRequestID = reason.EndKilled, p.signal.requestID
		switch {
		case p.signal.cause == "timeout":
			rec.EndCause = reason.EndTimeout
		case ex.OOMKilled:
			rec.EndCause = reason.EndOOMKilled
		}
		p.mu.Unlock()
	}
	keep := func(c *capture, total int64) (head, tail string, binary bool) {
		if c == nil {
			return "", "", false
		}
		rec.LinesDropped += c.dropped
		rec.BytesDropped += c.bytesDropped
		text := func(b []byte) string { return string(b) }
		if c.binary || looksBinary(c.head) {
			// Binary output is kept as base64, never escaped byte by byte.
			binary, text = true, func(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
		}
		head = text(c.head)
		if total > int64(len(c.head)) {
			tail = text(c.tailBytes())
		}
		return head, tail, binary
	}
	if len(p.caps) == 2 {
		rec.StdoutHead, rec.StdoutTail, rec.StdoutBinary = keep(p.caps[0], rec.StdoutBytes)
		rec.StderrHead, rec.StderrTail, rec.StderrBinary = keep(p.caps[1], rec.StderrBytes)
	}
	return rec
}

// envSecrets returns the values of envs whose names look secret, for the host to mask.
func envSecrets(envs map[string]string) []string {
	var out []string
	for k, v := range envs {
		if v != "" && redact.LooksSecret(k) {
			out = append(out, v)
		}
	}
	return out
}

func logStart(logger *slog.Logger, p *proc, cfg *pb.ProcessConfig, u *identity.User, cwd string) {
	envNames := make([]string, 0, len(cfg.GetEnvs()))
	for k := range cfg.GetEnvs() {
		envNames = append(envNames, k)
	}
	sort.Strings(envNames)
	logger.Info("process start",
		telemetry.KeyPID, p.pid, telemetry.KeyProcessCommand, cfg.GetCmd(), telemetry.KeyProcessArgsCount, len(cfg.GetArgs()),
		telemetry.KeyProcessTag, p.tag, telemetry.KeyProcessUser, u.Name, telemetry.KeyProcessCwd, cwd, telemetry.KeyProcessPTY, p.pty != nil,
		telemetry.KeyProcessEnvNames, envNames)
}

func (s *Service) unreserve(p *proc, err error) error {
	if p.tag != "" {
		s.table.releaseTag(p.tag)
	}
	return err
}

func (s *Service) logProcessEnd(logger interface {
	Info(string, ...any)
}, p *proc, ex exit) {
	attrs := []any{
		telemetry.KeyPID, p.pid, telemetry.KeyProcessTag, p.tag,
		telemetry.KeyProcessExited, ex.Exited, telemetry.KeyProcessStatus, ex.Text,
		telemetry.KeyDurationMS, time.Since(p.started).Milliseconds(),
		telemetry.KeyProcessStdoutBytes, p.stdoutBytes.Load(), telemetry.KeyProcessStderrBytes, p.stderrBytes.Load(),
		telemetry.KeyProcessCPUUserMS, time.Duration(ex.Rusage.Utime.Nano()).Milliseconds(),
		telemetry.KeyProcessCPUSystemMS, time.Duration(ex.Rusage.Stime.Nano()).Milliseconds(),
		telemetry.KeyProcessMaxRSSKiB, ex.Rusage.Maxrss,
	}
	if ex.Exited {
		attrs = append(attrs, telemetry.KeyExitCode, ex.Code)
	} else {
		attrs = append(attrs, telemetry.KeySignal, unix.SignalName(ex.Signal))
		p.mu.Lock()
		if p.signal.requestID != "" {
			attrs = append(attrs, telemetry.KeySignalRequestID, p.signal.requestID, telemetry.KeySignalSent, p.signal.name)
		}
		p.mu.Unlock()
	}
	logger.Info("process end", attrs...)
}

// buildEnv layers the environment as E2B does: PATH, HOME, USER, LOGNAME, then the sandbox's
// env vars, then the request's.
func buildEnv(u *identity.User, sandbox, request map[string]string) []string {
	vars := map[string]string{"PATH": defaultPATH, "HOME": u.Home, "USER": u.Name, "LOGNAME": u.Name}
	for k, v := range sandbox {
		vars[k] = v
	}
	for k, v := range request {
		vars[k] = v
	}
	env := make([]string, 0, len(vars))
	for k, v := range vars {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	return env
}

// lookPath finds name in the PATH of the process's own environment, not envd's.
func lookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		if isExecutable(name) {
			return name, nil
		}
		return "", fmt.Errorf("%w: command %q is not an executable file", fault.ErrNotFound, name)
	}
	path := defaultPATH
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		if full := filepath.Join(dir, name); isExecutable(full) {
			return full, nil
		}
	}
	return "", fmt.Errorf("%w: command %q not found in PATH", fault.ErrNotFound, name)
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// workdir picks the process's cwd: the request's (relative to home), else the sandbox
// default, else the user's home; it must be an existing directory.
func workdir(u *identity.User, requested *string, sandboxDefault string) (string, error) {
	dir := u.Home
	if requested != nil && *requested != "" {
		d, err := u.ResolvePath(*requested)
		if err != nil {
			return "", fmt.Errorf("%w: cwd: %v", fault.ErrInvalid, err)
		}
		dir = d
	} else if sandboxDefault != "" {
		dir = sandboxDefault
	}
	st, err := os.Stat(dir)
	if err != nil && dir == u.Home && (requested == nil || *requested == "") && sandboxDefault == "" {
		return "/", nil // an account whose home does not exist (nobody's /nonexistent) runs in /
	}
	if err != nil {
		return "", fmt.Errorf("%w: cwd %q does not exist", fault.ErrInvalid, dir)
	}
	if !st.IsDir() {
		return "", fmt.Errorf("%w: cwd %q is not a directory", fault.ErrInvalid, dir)
	}
	return dir, nil
}

// pipe returns a pipe's two ends as (ours, the child's): ours (end 0 is the read end, 1 the
// write end) is non-blocking and polled by the runtime, as os.Pipe's are; the child's is a
// plain blocking descriptor, never registered with the poller, which os.Pipe would register
// and exec then switch back to blocking: two fcntl calls and two epoll_ctl saved per pipe.
func pipe(ours int) (own, child *os.File, err error) {
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return nil, nil, os.NewSyscallError("pipe2", err)
	}
	if _, err := unix.FcntlInt(uintptr(fds[1-ours]), unix.F_SETFL, 0); err != nil { // child's end blocking
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, nil, os.NewSyscallError("fcntl", err)
	}
	names := [2]string{"|0", "|1"}
	return os.NewFile(uintptr(fds[ours]), names[ours]), os.NewFile(uintptr(fds[1-ours]), names[1-ours]), nil
}

var devNull struct {
	once sync.Once
	f    *os.File
	err  error
}

// devNullFile is /dev/null, opened once for every process started without stdin.
func devNullFile() (*os.File, error) {
	devNull.once.Do(func() { devNull.f, devNull.err = os.Open(os.DevNull) })
	return devNull.f, devNull.err
}

// preferForOOM, as the sandbox's init, lets the OOM killer prefer the command over envd:
// raising a score needs no privilege, and the command's own children inherit it. It also
// reads the sandbox's OOM kill count, which tells an OOM kill of this process from another
// SIGKILL at its end (a kill in the microseconds before this read reads as plain killed).
// Start calls it once the start event is out, off the round trip's path (the write costs a
// /proc lookup, about 20 us here, the read 7 us); the reaper's lock keeps the pid from being
// reaped, and reused, meanwhile.
func (s *Service) preferForOOM(p *proc) {
	if s.reaper.central {
		s.reaper.whileWaiting(p.pid, func() {
			setOOMScoreAdj(p.pid)
			n := oomKills()
			p.mu.Lock()
			p.oomBefore = n
			p.mu.Unlock()
		})
	}
}

// setOOMScoreAdj writes oomScoreAdj for pid with plain syscalls: an *os.File would also try
// to register the /proc file with the poller and fail, on every process start.
func setOOMScoreAdj(pid int) {
	fd, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/oom_score_adj", unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	_, _ = unix.Write(fd, []byte(oomScoreAdj))
	_ = unix.Close(fd)
}

func closeAll(files ...*os.File) {
	for _, f := range files {
		if f != nil {
			_ = f.Close()
		}
	}
}

func startError(err error) error {
	switch {
	case os.IsPermission(err):
		return fmt.Errorf("%w: %v", fault.ErrPermission, err)
	case os.IsNotExist(err):
		return fmt.Errorf("%w: %v", fault.ErrNotFound, err)
	}
	return err
}

// growPipe asks the kernel for pipeSize of buffer behind r, an output pipe a read found full.
// Through the raw conn: Fd would put r back in blocking mode.
func growPipe(r *os.File) {
	if rc, err := r.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { _, _ = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, pipeSize) })
	}
}
