package runtime

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"
)

// This file: lazy restores. `criu lazy-pages` serves a restored sandbox's memory from its
// checkpoint over userfaultfd while the sandbox already runs: a page is read when first
// touched, and the daemon pushes the rest in the background until none is left, then exits.
// The restore no longer waits for every page to be read first.

// lazySocketWait bounds how long a restore waits for the daemon's socket.
const lazySocketWait = 2 * time.Second

// lazyPages is one running `criu lazy-pages` daemon and the images it serves.
type lazyPages struct {
	cmd    *exec.Cmd
	images string
	keep   atomic.Bool   // until the restore succeeded: the images stay, the checkpoint is still there
	done   chan struct{} // closed once the daemon exited and its images are removed (or kept)
}

// startLazyPages starts the daemon serving images for a restore whose CRIU work dir is
// work (the daemon's socket is there). It runs in a session of its own: a server that stops,
// or dies, leaves it to finish serving the sandbox it restored.
func startLazyPages(ctx context.Context, images, work string) (*lazyPages, error) {
	_ = os.Remove(filepath.Join(work, "lazy-pages.socket"))
	cmd := exec.Command("criu", "lazy-pages", "--images-dir", images, "--work-dir", work, "-o", "lazy-pages.log", "-v2")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("criu lazy-pages: %w", err)
	}
	lp := &lazyPages{cmd: cmd, images: images, done: make(chan struct{})}
	lp.keep.Store(true)
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
		if !lp.keep.Load() {
			_ = os.RemoveAll(images)
		}
		close(lp.done)
	}()
	deadline := time.NewTimer(lazySocketWait)
	defer deadline.Stop()
	for {
		if _, err := os.Stat(filepath.Join(work, "lazy-pages.socket")); err == nil {
			return lp, nil
		}
		select {
		case <-exited:
			return nil, fmt.Errorf("criu lazy-pages exited before it listened: %s", criuLogErrors(filepath.Join(work, "lazy-pages.log")))
		case <-deadline.C:
			lp.stop()
			return nil, fmt.Errorf("criu lazy-pages did not listen within %s", lazySocketWait)
		case <-ctx.Done():
			lp.stop()
			return nil, ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}

// stop kills the daemon of a restore that failed, keeping its images, and waits for it.
func (lp *lazyPages) stop() {
	_ = lp.cmd.Process.Kill()
	<-lp.done
}

// restored says the restore succeeded: the images go once the daemon has served them.
func (lp *lazyPages) restored() {
	lp.keep.Store(false)
	select {
	case <-lp.done: // it finished before we knew
		_ = os.RemoveAll(lp.images)
	default:
	}
}

// wait returns once the daemon has served every page (or ctx ends): a checkpoint of the
// sandbox must not start while some of its memory is still in the old images.
func (lp *lazyPages) wait(ctx context.Context) error {
	if lp == nil {
		return nil
	}
	select {
	case <-lp.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("the sandbox's memory is still being restored: %w", ctx.Err())
	}
}
