package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// Adopter is a Runtime whose sandboxes outlive the process that drives it: a new process
// (a restarted server) takes over a sandbox an earlier one left running or frozen, with the
// same processes, and reads its output from where the earlier one stopped.
type Adopter interface {
	// Adopt takes over sandbox id and returns it with fresh read ends of its init's stdout
	// and stderr, and whether it runs or is frozen. A sandbox whose init is gone (it died
	// while nobody watched) is ErrNotFound; one made in a way that cannot be taken over
	// (plain pipes whose reader died) is ErrNotAdoptable.
	Adopt(ctx context.Context, id string) (*Sandbox, State, error)
}

// ErrNotAdoptable: the sandbox exists but cannot be taken over (see Adopter).
var ErrNotAdoptable = errors.New("sandbox cannot be adopted")

var _ Adopter = (*Runc)(nil)

// The init's stdout and stderr are FIFOs in the sandbox's directory, so that they outlive
// the process that reads them. The init holds each open read-write: the FIFO always has a
// reader, so a write while no server reads never fails (EPIPE would kill envd); it waits once
// the FIFO's buffer is full, and envd drops and counts what it cannot queue. A new server
// opens the read end by name and reads on from what the buffer kept.
const (
	stdoutFifo = "stdout.fifo"
	stderrFifo = "stderr.fifo"
	// fifoBytes is each FIFO's buffer: what a sandbox's output can wait there while no
	// server reads (the kernel's default is 64 KiB).
	fifoBytes = 1 << 20
)

// openStdio makes the FIFO name in dir and returns its read end (non-blocking, for Go's
// poller) and a read-write end to hand to the init (blocking, as stdio is expected to be).
func openStdio(dir, name string) (r, w *os.File, err error) {
	path := filepath.Join(dir, name)
	if err := unix.Mkfifo(path, 0o600); err != nil {
		return nil, nil, fmt.Errorf("make %s: %w", name, err)
	}
	wfd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open %s: %w", name, err)
	}
	w = os.NewFile(uintptr(wfd), path)
	// Best effort: a smaller buffer only keeps less output while no server reads.
	_, _ = unix.FcntlInt(uintptr(wfd), unix.F_SETPIPE_SZ, fifoBytes)
	if r, err = openFifoReader(path); err != nil {
		w.Close()
		return nil, nil, err
	}
	return r, w, nil
}

// openFifoReader opens a FIFO's read end without waiting for a writer.
func openFifoReader(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", filepath.Base(path), err)
	}
	return f, nil
}

// Adopt implements Adopter: it asks runc for the sandbox's state and init pid, watches the
// init through a pidfd (it is no child of this process, so it cannot be waited for: its exit
// code is unknown, an OOM kill is read from the cgroup) and opens the stdio FIFOs again.
func (r *Runc) Adopt(ctx context.Context, id string) (_ *Sandbox, _ State, err error) {
	if err := ValidID(id); err != nil {
		return nil, StateUnknown, err
	}
	unlock := r.lock(id)
	defer unlock()
	if r.get(id) != nil {
		return nil, StateUnknown, fmt.Errorf("adopt %s: %w", id, ErrExists)
	}
	out, err := r.runc(ctx, "state", id)
	if err != nil {
		return nil, StateUnknown, fmt.Errorf("adopt %s: %w", id, err)
	}
	var st struct {
		Status string `json:"status"`
		Pid    int    `json:"pid"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return nil, StateUnknown, fmt.Errorf("adopt %s: runc state: %w", id, err)
	}
	state := State(st.Status)
	if (state != StateRunning && state != StatePaused) || st.Pid <= 0 {
		return nil, state, fmt.Errorf("adopt %s: init is %s: %w", id, state, ErrNotFound)
	}
	dir := r.dir(id)
	if _, err := os.Stat(filepath.Join(dir, stdoutFifo)); err != nil {
		return nil, state, fmt.Errorf("adopt %s: no stdio FIFOs (made by an older cove, with pipes): %w", id, ErrNotAdoptable)
	}
	pidfd, err := unix.PidfdOpen(st.Pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return nil, state, fmt.Errorf("adopt %s: init %d: %w: %w", id, st.Pid, err, ErrNotFound)
	}
	watch := os.NewFile(uintptr(pidfd), fmt.Sprintf("pidfd:%d", st.Pid))
	defer func() {
		if err != nil {
			watch.Close()
		}
	}()
	stdout, err := openFifoReader(filepath.Join(dir, stdoutFifo))
	if err != nil {
		return nil, state, fmt.Errorf("adopt %s: %w", id, err)
	}
	stderr, err := openFifoReader(filepath.Join(dir, stderrFifo))
	if err != nil {
		stdout.Close()
		return nil, state, fmt.Errorf("adopt %s: %w", id, err)
	}
	network := NetworkHost
	if _, err := os.Stat(r.netnsPath(id)); err == nil {
		network = NetworkLoopback
	}
	sb := &sandbox{id: id, pid: st.Pid, network: network, exited: make(chan struct{})}
	if err := r.watchExit(sb, watch); err != nil {
		stdout.Close()
		stderr.Close()
		return nil, state, fmt.Errorf("adopt %s: %w", id, err)
	}
	r.mu.Lock()
	r.sandboxes[id] = sb
	r.mu.Unlock()
	return &Sandbox{ID: id, Pid: st.Pid, Stdout: stdout, Stderr: stderr}, state, nil
}

// watchExit closes sb.exited once the (adopted) init exits, as a pidfd reports it. Its exit
// status belongs to whoever its parent is now, so Exit says only that it ended, and whether
// the OOM killer acted in the sandbox.
func (r *Runc) watchExit(sb *sandbox, pidfd *os.File) error {
	rc, err := pidfd.SyscallConn()
	if err != nil {
		return fmt.Errorf("watch init %d: %w", sb.pid, err)
	}
	cgroup := r.cgroupPath(sb.id)
	go func() {
		defer close(sb.exited)
		defer pidfd.Close()
		exited := func(fd uintptr, wait int) bool {
			n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, wait)
			return err == nil && n > 0
		}
		werr := rc.Read(func(fd uintptr) bool { return exited(fd, 0) })
		if werr != nil {
			// Not in Go's poller (it should be): block a thread on the pidfd instead.
			werr = rc.Control(func(fd uintptr) {
				for !exited(fd, -1) {
				}
			})
		}
		sb.exit = Exit{Code: -1, At: time.Now(), OOMKilled: oomKills(cgroup) > 0, Signal: "unknown (adopted: not this server's child)"}
		if werr != nil {
			sb.exit.Signal = "unknown: " + werr.Error()
		}
	}()
	return nil
}
