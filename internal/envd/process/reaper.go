package process

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// exit is how a process ended, read from its wait status.
type exit struct {
	Code   int32          // exit code, or -1 when a signal ended it
	Exited bool           // it called exit (rather than being signalled)
	Signal syscall.Signal // the signal that ended it, when !Exited
	Text   string         // "exit status 3", "signal: killed", as E2B's envd reports it
	Rusage unix.Rusage
}

func exitFrom(ws unix.WaitStatus, ru unix.Rusage) exit {
	switch {
	case ws.Exited():
		return exit{Code: int32(ws.ExitStatus()), Exited: true, Text: "exit status " + strconv.Itoa(ws.ExitStatus()), Rusage: ru}
	case ws.Signaled():
		return exit{Code: -1, Signal: ws.Signal(), Text: "signal: " + ws.Signal().String(), Rusage: ru}
	}
	return exit{Code: -1, Text: fmt.Sprintf("wait status %#x", uint32(ws)), Rusage: ru}
}

// reaper starts children and collects their exit status.
//
// As PID 1 (or a subreaper) envd inherits orphans that nobody waits for, and they must be
// reaped or they fill pids.max. A Wait4(-1) loop would then race the waits for our own
// children and steal their exit status, so in that mode one loop owns every wait: it runs
// under the same mutex as start-and-register, so it can never reap a child whose pid is not
// yet recorded, and it hands each status to the child's owner. Outside that mode each child
// is waited for by pid and nothing else is touched.
type reaper struct {
	central bool
	mu      sync.Mutex
	waiting map[int]func(exit)
}

func newReaper(central bool) *reaper {
	r := &reaper{central: central, waiting: map[int]func(exit){}}
	if central {
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGCHLD)
		go func() {
			for range sigs {
				r.reapAll()
			}
		}()
	}
	return r
}

// start runs startFn, which forks the child and returns its pid, and calls onExit with the
// child's exit exactly once. onExit must not block: in PID 1 mode the reaper calls it.
func (r *reaper) start(startFn func() (int, error), onExit func(exit)) (int, error) {
	if !r.central {
		pid, err := startFn()
		if err != nil {
			return 0, err
		}
		go func() { onExit(waitPID(pid)) }()
		return pid, nil
	}
	r.mu.Lock()
	pid, err := startFn()
	if err == nil {
		r.waiting[pid] = onExit
	}
	r.mu.Unlock()
	if err != nil {
		return 0, err
	}
	r.reapAll() // the child may have exited before it was registered
	return pid, nil
}

func (r *reaper) reapAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		var ws unix.WaitStatus
		var ru unix.Rusage
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, &ru)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
		if ws.Stopped() || ws.Continued() {
			continue
		}
		if onExit, ok := r.waiting[pid]; ok {
			delete(r.waiting, pid)
			onExit(exitFrom(ws, ru))
		}
		// Anything else was an orphan re-parented to us: reaped, nothing to report.
	}
}

func waitPID(pid int) exit {
	for {
		var ws unix.WaitStatus
		var ru unix.Rusage
		_, err := unix.Wait4(pid, &ws, 0, &ru)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return exit{Code: -1, Text: "wait: " + err.Error()}
		}
		if ws.Stopped() || ws.Continued() {
			continue
		}
		return exitFrom(ws, ru)
	}
}
