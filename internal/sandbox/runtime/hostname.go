package runtime

import (
	"fmt"
	goruntime "runtime"

	"golang.org/x/sys/unix"
)

// setHostname sets the hostname of the UTS namespace process pid is in. A restore brings
// back the UTS namespace of the sandbox checkpointed, with its hostname: a copy (a fork,
// a sandbox from a snapshot or a template's start snapshot) is given its own id instead.
// The thread that joins the namespace is never given back to Go's scheduler: it exits
// with the goroutine.
func setHostname(pid int, name string) error {
	done := make(chan error, 1)
	go func() {
		goruntime.LockOSThread() // not unlocked: the thread ends in the sandbox's namespace
		fd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/uts", pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			done <- fmt.Errorf("open the UTS namespace of %d: %w", pid, err)
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWUTS); err != nil {
			done <- fmt.Errorf("join the UTS namespace of %d: %w", pid, err)
			return
		}
		done <- unix.Sethostname([]byte(name))
	}()
	return <-done
}
