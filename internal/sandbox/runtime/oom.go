package runtime

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// OOMEvents returns a channel that receives the sandbox's OOM kill count each time the
// kernel's OOM killer acts in its memory cgroup, and closes when the cgroup goes away or ctx
// ends. It uses cgroup v1's memory.oom_control eventfd, so nothing polls. The eventfd and both
// goroutines are released when either happens: a caller that cancels ctx at the sandbox's end
// leaves nothing behind.
func (r *Runc) OOMEvents(ctx context.Context, id string) (<-chan uint64, error) {
	dir := filepath.Join(cgroupRoot, "memory", r.cgroupPath(id))
	ctl, err := os.Open(filepath.Join(dir, "memory.oom_control"))
	if err != nil {
		return nil, fmt.Errorf("%w: oom events of %s: %v", ErrNotFound, id, err)
	}
	// Non-blocking, so the runtime's poller owns it and Close wakes a blocked Read.
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		ctl.Close()
		return nil, fmt.Errorf("oom events of %s: eventfd: %w", id, err)
	}
	reg := fmt.Sprintf("%d %d", efd, ctl.Fd())
	if err := os.WriteFile(filepath.Join(dir, "cgroup.event_control"), []byte(reg), 0); err != nil {
		unix.Close(efd)
		ctl.Close()
		return nil, fmt.Errorf("oom events of %s: register: %w", id, err)
	}
	ev := os.NewFile(uintptr(efd), "oom-eventfd")
	out := make(chan uint64, 1)
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
		case <-done:
		}
		ev.Close() // unblocks the reader, or releases the fd after it returned
	}()
	go func() {
		defer close(out)
		defer close(done)
		defer ctl.Close()
		var buf [8]byte
		last := oomKills(r.cgroupPath(id))
		for {
			if _, err := ev.Read(buf[:]); err != nil || binary.LittleEndian.Uint64(buf[:]) == 0 {
				return
			}
			// The kernel also signals when the cgroup is removed: then the file is gone.
			if _, err := os.Stat(dir); err != nil {
				return
			}
			// The event comes when the cgroup hits its limit, a moment before the kernel counts
			// the kill (or reclaims enough and kills nothing): wait a little for the count.
			n := last
			for i := 0; i < 40 && n <= last; i++ {
				time.Sleep(5 * time.Millisecond)
				n = oomKills(r.cgroupPath(id))
			}
			if n <= last {
				continue
			}
			last = n
			select {
			case out <- n:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}
