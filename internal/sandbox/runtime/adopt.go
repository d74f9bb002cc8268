package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Adopter is a Runtime whose sandboxes outlive the process that drives it: a new process
// (a restarted server) takes over a sandbox an earlier one left running or frozen, with the
// same processes, and reads its output from where the earlier one stopped.
type Adopter interface {
	// Adopt takes over sandbox id and returns it with fresh read ends of its init's stdout
	// and stderr, and whether it runs or is frozen. A checkpointed sandbox (Checkpointer)
	// is StateCheckpointed with no Sandbox: Restore it to run it. A sandbox whose init is gone (it died
	// while nobody watched) is ErrNotFound; one made in a way that cannot be taken over
	// (its stdio is not a pipe) is ErrNotAdoptable.
	Adopt(ctx context.Context, id string) (*Sandbox, State, error)
}

// ErrNotAdoptable: the sandbox exists but cannot be taken over (see Adopter).
var ErrNotAdoptable = errors.New("sandbox cannot be adopted")

var _ Adopter = (*Runc)(nil)

// The init's stdout and stderr are pipes whose read ends the server holds. They outlive the
// server: envd keeps a read end of each open inside the sandbox (so a write while no server
// reads waits in the buffer, never fails), and a new server opens them again through the
// init's /proc/<pid>/fd links, reading on from what the buffer kept. Pipes, not files or
// FIFOs on a host path, are also what CRIU can checkpoint and restore.
const (
	// pipeBytes is each pipe's buffer: what a sandbox's output can wait there while no
	// server reads (the kernel's default is 64 KiB).
	pipeBytes = 1 << 20
)

// openStdio returns a pipe for the init's stdout or stderr: the read end (non-blocking, for
// Go's poller) and the write end to hand to runc.
func openStdio() (r, w *os.File, err error) {
	r, w, err = os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	growPipe(r)
	return r, w, nil
}

// growPipe sets f's pipe buffer to pipeBytes, best effort: a smaller buffer only keeps less
// output while no server reads.
func growPipe(f *os.File) {
	if rc, err := f.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { _, _ = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, pipeBytes) })
	}
}

// openInitPipe opens a new read end of the pipe that is the init's fd n.
func openInitPipe(pid, n int) (*os.File, error) {
	link := fmt.Sprintf("/proc/%d/fd/%d", pid, n)
	target, err := os.Readlink(link)
	if err != nil {
		return nil, fmt.Errorf("init's fd %d: %w", n, err)
	}
	if !strings.HasPrefix(target, "pipe:[") {
		return nil, fmt.Errorf("init's fd %d is %s, not a pipe: %w", n, target, ErrNotAdoptable)
	}
	f, err := os.OpenFile(link, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("open init's fd %d: %w", n, err)
	}
	growPipe(f)
	return f, nil
}

// Adopt implements Adopter: it asks runc for the sandbox's state and init pid, watches the
// init through a pidfd (it is no child of this process, so it cannot be waited for: its exit
// code is unknown, an OOM kill is read from the cgroup) and opens its stdio pipes again.
func (r *Runc) Adopt(ctx context.Context, id string) (_ *Sandbox, _ State, err error) {
	if err := ValidID(id); err != nil {
		return nil, StateUnknown, err
	}
	unlock := r.lock(id)
	defer unlock()
	if r.get(id) != nil {
		return nil, StateUnknown, fmt.Errorf("adopt %s: %w", id, ErrExists)
	}
	out, err := r.runc(ctx, r.engineOf(id), "state", id)
	if errors.Is(err, ErrNotFound) && r.checkpointed(id) {
		return nil, StateCheckpointed, nil // on disk: Restore brings it back
	}
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
	if zombie(st.Pid) {
		// runsc's state counts a sandbox process that died but was not yet reaped (its
		// parent was the server that went away) as running: it is gone all the same.
		return nil, state, fmt.Errorf("adopt %s: init %d has exited: %w", id, st.Pid, ErrNotFound)
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
	engine := r.engineOf(id)
	var stdout, stderr *os.File
	if engine == EngineRunsc {
		stdout, stderr, err = openRunscStdio(r.dir(id), st.Pid)
	} else {
		stdout, err = openInitPipe(st.Pid, 1)
		if err == nil {
			if stderr, err = openInitPipe(st.Pid, 2); err != nil {
				stdout.Close()
			}
		}
	}
	if err != nil {
		return nil, state, fmt.Errorf("adopt %s: %w", id, err)
	}
	network, joined := r.networkOf(id, st.Pid, "")
	sb := &sandbox{id: id, engine: engine, pid: st.Pid, network: network, netns: joined, exited: make(chan struct{})}
	if engine == EngineRunsc {
		if cfg, err := os.ReadFile(filepath.Join(r.dir(id), "config.json")); err == nil {
			sb.memLimit = configMemoryLimit(cfg)
		}
	}
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

// networkOf says how to reach sandbox id whose init is pid: in its own pinned namespace, in
// joined (the namespace it was given, Spec.Netns), through its init's namespace when it is
// not the host's (a namespace a previous server made and this one does not pin), or on the
// host.
func (r *Runc) networkOf(id string, pid int, joined string) (Network, string) {
	if joined != "" {
		return NetworkLoopback, joined
	}
	if _, err := os.Stat(r.netnsPath(id)); err == nil {
		return NetworkLoopback, ""
	}
	own, err1 := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid))
	host, err2 := os.Readlink("/proc/self/ns/net")
	if err1 == nil && err2 == nil && own != host {
		return NetworkLoopback, fmt.Sprintf("/proc/%d/ns/net", pid)
	}
	return NetworkHost, ""
}

// zombie reports whether pid has exited and waits for its parent to reap it.
func zombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(f) > 0 && (f[0] == "Z" || f[0] == "X")
}
