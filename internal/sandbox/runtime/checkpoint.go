package runtime

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/internal/errdefs"
	"github.com/cove-dev/cove/internal/observe/telemetry"
)

// Checkpointer is a Runtime that can write a sandbox's processes, memory and open files to
// disk, freeing its memory, and bring them back with the same processes, PIDs and memory.
// The runc driver does it with CRIU (version 4 or newer).
type Checkpointer interface {
	// Checkpoint writes the sandbox to disk beside its root and stops its processes; its
	// root, network namespace and files stay for Restore. On failure the sandbox runs on.
	// Wait then reports the init's exit with Exit.Checkpointed set.
	Checkpoint(ctx context.Context, id string) (CheckpointInfo, error)
	// Restore brings a checkpointed sandbox back, with new read ends of its stdout and
	// stderr, and removes the checkpoint.
	Restore(ctx context.Context, id string) (*Sandbox, error)
	// CanCheckpoint says whether checkpoints work on this machine, and why not.
	CanCheckpoint() error
	// Export copies a checkpointed sandbox's checkpoint and files to dir, for new sandboxes
	// started from it (Spec.Restore): forks and snapshots.
	Export(ctx context.Context, id, dir string) (int64, error)
	// CheckpointBytes is what sandbox id's checkpoint takes on disk now; 0 without one.
	CheckpointBytes(id string) int64
}

// CheckpointInfo is what a checkpoint cost.
type CheckpointInfo struct {
	Bytes int64 // on disk
	// ZeroBytes are the zero pages the images hold as holes: memory the sandbox touched
	// that takes no disk (Bytes + ZeroBytes is what the images would take without them).
	ZeroBytes int64
	Duration  time.Duration
}

// ErrNoCheckpoint: the sandbox has no checkpoint to restore.
var ErrNoCheckpoint = errors.New("no checkpoint")

// ErrNoSpace: the disk the checkpoint goes to is full.
var ErrNoSpace = errdefs.New(errdefs.ErrNoSpace, "no space left on the data dir's disk")

var _ Checkpointer = (*Runc)(nil)

// StateCheckpointed is a sandbox whose processes are on disk (Checkpoint), not running.
const StateCheckpointed State = "checkpointed"

func (r *Runc) checkpointDir(id string) string { return filepath.Join(r.dir(id), "checkpoint") }
func (r *Runc) criuWorkDir(id string) string   { return filepath.Join(r.dir(id), "criu") }

// criuConfig is the CRIU configuration every checkpoint and restore uses (runc passes it by
// the org.criu.config annotation). tcp-close: the host's connections to envd are cut at a
// pause anyway, and a sandbox's TCP peers are outside what is checkpointed.
const criuConfig = "tcp-close\n"

func (r *Runc) criuConfigPath() string { return filepath.Join(r.cfg.DataDir, "criu.conf") }

// CanCheckpoint implements Checkpointer for the default engine's sandboxes (CanCheckpointOn).
func (r *Runc) CanCheckpoint() error { return r.CanCheckpointOn(r.cfg.DefaultEngine) }

// CanCheckpointOn says whether sandboxes of engine can be checkpointed here, and why not:
// runc's checkpoints need a criu binary of version 4 or newer (3.x fails on current
// kernels); runsc's are its own and need only runsc.
func (r *Runc) CanCheckpointOn(engine Engine) error {
	if engine == EngineRunsc {
		return r.EngineErr(engine)
	}
	r.criuOnce.Do(func() {
		path, err := exec.LookPath("criu")
		if err != nil {
			r.criuErr = fmt.Errorf("checkpoints need CRIU 4 or newer: no criu in PATH (scripts/criu.sh builds it)")
			return
		}
		out, err := exec.Command(path, "--version").Output()
		if err != nil {
			r.criuErr = fmt.Errorf("checkpoints need CRIU 4 or newer: %s --version: %w", path, err)
			return
		}
		var major int
		if _, err := fmt.Sscanf(strings.TrimPrefix(strings.TrimSpace(string(out)), "Version: "), "%d.", &major); err != nil || major < 4 {
			r.criuErr = fmt.Errorf("checkpoints need CRIU 4 or newer, %s says %q (scripts/criu.sh builds 4.1.1)", path, strings.TrimSpace(string(out)))
			return
		}
		r.criuErr = os.WriteFile(r.criuConfigPath(), []byte(criuConfig), 0o600)
	})
	return r.criuErr
}

// Checkpoint implements Checkpointer with `runc checkpoint` (CRIU), or runsc's own.
func (r *Runc) Checkpoint(ctx context.Context, id string) (CheckpointInfo, error) {
	begun := time.Now()
	if err := r.CanCheckpointOn(r.engineOf(id)); err != nil {
		return CheckpointInfo{}, fmt.Errorf("checkpoint %s: %w", id, err)
	}
	unlock := r.lock(id)
	defer unlock()
	sb := r.get(id)
	if sb == nil {
		return CheckpointInfo{}, fmt.Errorf("checkpoint %s: %w", id, ErrNotFound)
	}
	if sb.engine == EngineRunsc {
		return r.checkpointRunsc(ctx, sb, begun)
	}
	if err := sb.lazy.wait(ctx); err != nil {
		return CheckpointInfo{}, fmt.Errorf("checkpoint %s: %w", id, err)
	}
	img, work := r.checkpointDir(id), r.criuWorkDir(id)
	for _, d := range []string{img, work} {
		if err := os.RemoveAll(d); err != nil {
			return CheckpointInfo{}, fmt.Errorf("checkpoint %s: %w", id, err)
		}
		if err := os.Mkdir(d, 0o700); err != nil {
			return CheckpointInfo{}, fmt.Errorf("checkpoint %s: %w", id, err)
		}
	}
	sb.checkpointing.Store(true)
	// Frozen first, by the fast freeze: CRIU's own polls a v1 freezer in 100 ms steps, and
	// finds it frozen. It seizes the processes and thaws the cgroup itself; on a failure
	// before that, the thaw here lets the sandbox run on.
	freezer := filepath.Join(cgroupRoot, "freezer", r.cgroupPath(id))
	_, err := os.Stat(filepath.Join(freezer, "freezer.state"))
	frozen := err == nil
	if frozen {
		if err := freezeV1(ctx, freezer, freezePatience); err != nil {
			sb.checkpointing.Store(false)
			return CheckpointInfo{}, fmt.Errorf("checkpoint %s: %w", id, err)
		}
	}
	if _, err := r.runc(ctx, r.engineOf(id), "checkpoint", "--image-path", img, "--work-path", work, id); err != nil {
		sb.checkpointing.Store(false)
		if frozen {
			_ = thawV1(filepath.Join(freezer, "freezer.state"))
		}
		log := filepath.Join(work, "dump.log")
		// A full disk may not even let CRIU log why: look at the disk too, before the
		// half-written images are removed.
		if b, _ := os.ReadFile(log); strings.Contains(string(b), "No space left on device") || nearlyFull(img) {
			err = fmt.Errorf("%w: %w", ErrNoSpace, err)
		}
		_ = os.RemoveAll(img)
		return CheckpointInfo{}, fmt.Errorf("checkpoint %s: %w%s", id, err, criuLogErrors(log))
	}
	select {
	case <-sb.exited:
	case <-time.After(10 * time.Second):
		return CheckpointInfo{}, fmt.Errorf("checkpoint %s: init %d still runs after its checkpoint", id, sb.pid)
	}
	// sb stays, exited, so Wait reports the checkpoint; Restore replaces it. The processes
	// are on disk now: a failure to punch holes only leaves the images bigger.
	freed, err := sparsify(img)
	if err != nil {
		telemetry.Logger(ctx).Warn("checkpoint kept its zero pages on disk", telemetry.KeyError, err.Error())
	}
	return CheckpointInfo{Bytes: diskBytes(img), ZeroBytes: freed, Duration: time.Since(begun)}, nil
}

// Restore implements Checkpointer with `runc restore --detach` (CRIU). The restored init
// becomes this process's child once runc exits (it is a subreaper), and is reaped as a
// created one is.
func (r *Runc) Restore(ctx context.Context, id string) (_ *Sandbox, err error) {
	engine := r.engineOf(id)
	if err := r.CanCheckpointOn(engine); err != nil {
		return nil, fmt.Errorf("restore %s: %w", id, err)
	}
	unlock := r.lock(id)
	defer unlock()
	joined := "" // the network namespace the sandbox joined (Spec.Netns): the restore is in it again
	if old := r.get(id); old != nil {
		select {
		case <-old.exited:
		default:
			return nil, fmt.Errorf("restore %s: %w", id, ErrExists)
		}
		if !strings.HasPrefix(old.netns, "/proc/") { // an init's namespace dies with the init
			joined = old.netns
		}
	}
	img, work, dir := r.checkpointDir(id), r.criuWorkDir(id), r.dir(id)
	if !hasCheckpoint(img) {
		return nil, fmt.Errorf("restore %s: %w", id, ErrNoCheckpoint)
	}
	outR, outW, err := openStdio()
	if err != nil {
		return nil, fmt.Errorf("restore %s: %w", id, err)
	}
	errR, errW, err := openStdio()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, fmt.Errorf("restore %s: %w", id, err)
	}
	defer func() {
		if err != nil {
			outR.Close()
			errR.Close()
		}
	}()
	pidFile := filepath.Join(dir, "init.pid")
	_ = os.Remove(pidFile)
	logFile := filepath.Join(dir, "runc.log")
	bin, global, err := r.cli(engine)
	if err != nil {
		return nil, fmt.Errorf("restore %s: %w", id, err)
	}
	args := append(global, "--log", logFile, "--log-format", "json", "restore", "--detach")
	var lazy *lazyPages
	if r.cfg.LazyRestore && engine == EngineRunc {
		// The daemon serves the images from a directory of their own, which it removes once
		// done: the sandbox's checkpoint directory is free for its next checkpoint.
		served := img + ".lazy"
		_ = os.RemoveAll(served)
		if err := os.Rename(img, served); err != nil {
			return nil, fmt.Errorf("restore %s: %w", id, err)
		}
		if lazy, err = startLazyPages(ctx, served, work); err != nil {
			_ = os.Rename(served, img)
			return nil, fmt.Errorf("restore %s: %w", id, err)
		}
		orig := img
		defer func() {
			if err != nil { // the checkpoint stays for another try, as without lazy pages
				lazy.stop()
				_ = os.Rename(served, orig)
			}
		}()
		img = served
		args = append(args, "--lazy-pages")
	}
	args = append(args, "--image-path", img)
	if engine == EngineRunc {
		args = append(args, "--work-path", work)
	}
	cmd := exec.CommandContext(ctx, bin, append(args, "--bundle", dir, "--pid-file", pidFile, id)...)
	// CRIU gives the restored processes runc's stdout and stderr where they had the old
	// pipes (runc passes them as inherited fds): these are the new pipes' write ends.
	cmd.Stdout, cmd.Stderr = outW, errW
	if engine == EngineRunsc {
		releaseStdio(dir)
		err := recordStdio(dir, outW, errW)
		if err == nil {
			err = holdStdio(dir, outR, errR)
		}
		if err != nil {
			outW.Close()
			errW.Close()
			return nil, fmt.Errorf("restore %s: %w", id, err)
		}
	}
	runErr := cmd.Run()
	outW.Close()
	errW.Close()
	if runErr != nil {
		return nil, fmt.Errorf("restore %s: %s restore: %w: %s%s", id, engine, runErr, runcLogErrors(logFile), criuLogErrors(filepath.Join(work, "restore.log")))
	}
	pid, err := readPid(pidFile)
	if err != nil {
		return nil, fmt.Errorf("restore %s: %w", id, err)
	}
	if engine == EngineRunsc {
		r.reapGofer(id)
	}
	network, joined := r.networkOf(id, pid, joined)
	sb := &sandbox{id: id, engine: engine, pid: pid, network: network, netns: joined, exited: make(chan struct{}), lazy: lazy}
	if err := r.reap(sb); err != nil {
		return nil, fmt.Errorf("restore %s: %w", id, err)
	}
	r.mu.Lock()
	r.sandboxes[id] = sb
	r.mu.Unlock()
	if lazy == nil {
		_ = os.RemoveAll(img)
	} else {
		lazy.restored()
	}
	return &Sandbox{ID: id, Pid: pid, Stdout: outR, Stderr: errR}, nil
}

// CheckpointBytes implements Checkpointer.
func (r *Runc) CheckpointBytes(id string) int64 {
	if ValidID(id) != nil || !r.checkpointed(id) {
		return 0
	}
	return diskBytes(r.checkpointDir(id))
}

// checkpointed reports whether sandbox id has a checkpoint on disk.
func (r *Runc) checkpointed(id string) bool {
	return hasCheckpoint(r.checkpointDir(id))
}

// hasCheckpoint says whether dir holds a checkpoint's images: CRIU's (runc) or runsc's.
func hasCheckpoint(dir string) bool {
	for _, f := range []string{"inventory.img", runscCheckpointFile} {
		if exists(filepath.Join(dir, f)) {
			return true
		}
	}
	return false
}

// diskBytes is what the files under dir take on disk: sparse files count their allocated
// blocks, not their length.
func diskBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				n += allocated(fi)
			}
		}
		return nil
	})
	return n
}

// allocated is the bytes fi's blocks take on disk (its length where the system does not say).
func allocated(fi fs.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Blocks * 512
	}
	return fi.Size()
}

// criuLogErrors returns the Error lines of a CRIU log, prefixed for an error message.
func criuLogErrors(file string) string {
	b, err := os.ReadFile(file)
	if err != nil {
		return ""
	}
	var errs []string
	last := ""
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "Error (") && !strings.Contains(l, "RLIMIT_NOFILE") {
			errs = append(errs, strings.TrimSpace(l))
		}
		if strings.TrimSpace(l) != "" {
			last = strings.TrimSpace(l)
		}
	}
	if len(errs) == 0 {
		// Killed on a timeout, CRIU logs no error: where it stopped is the clue (such as
		// "Waiting for 1234 to trap", a breakpoint that never fires).
		if last == "" {
			return ""
		}
		return " (criu stopped at: " + last + ")"
	}
	if len(errs) > 5 {
		errs = errs[len(errs)-5:]
	}
	return " (criu: " + strings.Join(errs, "; ") + ")"
}

// Export copies checkpointed sandbox id's checkpoint and its upper dir (the files it wrote)
// to dir, which must not exist, for Spec.Restore: a fork's or a snapshot's source. It
// returns the bytes on disk.
func (r *Runc) Export(ctx context.Context, id, dir string) (int64, error) {
	unlock := r.lock(id)
	defer unlock()
	if !r.checkpointed(id) {
		return 0, fmt.Errorf("export %s: %w", id, ErrNoCheckpoint)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return 0, fmt.Errorf("export %s: %w", id, err)
	}
	for _, c := range [][2]string{{r.checkpointDir(id), "checkpoint"}, {r.UpperDir(id), "upper"}} {
		if err := copyTree(c[0], filepath.Join(dir, c[1])); err != nil {
			if strings.Contains(err.Error(), "No space left on device") || nearlyFull(dir) {
				err = fmt.Errorf("%w: %w", ErrNoSpace, err)
			}
			_ = os.RemoveAll(dir)
			return 0, fmt.Errorf("export %s: %w", id, err)
		}
	}
	return diskBytes(dir), nil
}

// copyTree copies directory src to dst (which must not exist) with everything a sandbox's
// upper dir holds: owners, modes, times, xattrs (overlayfs keeps opaque dirs there), device
// nodes (its whiteouts), hard links and sparse files.
func copyTree(src, dst string) error {
	out, err := exec.Command("cp", "-a", "--sparse=always", "--reflink=auto", src, dst).CombinedOutput()
	if err != nil {
		return fmt.Errorf("cp -a %s %s: %w: %s", src, dst, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// nearlyFull reports whether the filesystem of path has less than 1 MiB free.
func nearlyFull(path string) bool {
	var st unix.Statfs_t
	return unix.Statfs(path, &st) == nil && st.Bavail*uint64(st.Bsize) < 1<<20
}
