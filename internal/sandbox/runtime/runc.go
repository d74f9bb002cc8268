package runtime

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/internal/observe/telemetry"
)

// Config configures the runc driver. Zero fields take the defaults shown.
type Config struct {
	// DataDir holds one directory per sandbox: the OCI bundle (config.json), the overlay's
	// upper and work directories and the mounted root. Required; it must be on a filesystem
	// overlayfs accepts as an upper layer (ext4, xfs, tmpfs).
	DataDir string
	// RuncPath is the runc binary; "runc" in PATH by default.
	RuncPath string
	// RuncRoot is runc's state directory; /run/cove/runc by default.
	RuncRoot string
	// NetnsDir is where named network namespaces are pinned; /run/cove/netns by default.
	NetnsDir string
	// CgroupParent is the absolute cgroup path under which each sandbox gets <parent>/<id>;
	// /cove by default. Absolute, so that limits do not nest under the server's own cgroup.
	CgroupParent string
	// NoSeccomp leaves out the seccomp profile (for runc binaries built without libseccomp).
	NoSeccomp bool
	// NoFile is RLIMIT_NOFILE of sandboxes whose Limits leave it 0; DefaultNoFile when 0.
	NoFile uint64
	// DefaultEngine runs sandboxes whose Spec.Engine is empty; runc when empty.
	DefaultEngine Engine
	// RunscPath is gVisor's runsc binary; by default runsc beside the running executable
	// (bin/runsc next to bin/cove), else runsc in PATH. Without one, runc still works and
	// asking for runsc fails with ErrUnsupported.
	RunscPath string
	// RunscRoot is runsc's state directory; /run/cove/runsc by default.
	RunscRoot string
	// LazyRestore restores a checkpoint with its memory served on demand (CRIU's lazy pages
	// over userfaultfd): the sandbox runs before every page is read (lazy.go).
	LazyRestore bool
}

// DefaultNoFile is the open files each process of a sandbox may hold unless configured:
// with the orchestrator's 512 pids, a sandbox holds at most about a million files (the
// server's own 20,000 inherited let one hold half of a host's 2.4 million).
const DefaultNoFile = 2048

// Runc is the default Runtime: it writes an OCI bundle per sandbox and drives the runc CLI,
// the way containerd does. Cove owns what surrounds runc: the overlay root, the named network
// namespace, the absolute cgroup path and the init's stdio pipes.
//
// A Runc makes its process a child subreaper (PR_SET_CHILD_SUBREAPER), so each sandbox's init
// becomes its child once runc exits: Runc reaps it, learns its exit status and leaves no zombie.
type Runc struct {
	cfg     Config
	seccomp bool

	mu        sync.Mutex
	sandboxes map[string]*sandbox
	locks     map[string]*idLock

	criuOnce sync.Once // CanCheckpoint's verdict, found once
	criuErr  error

	runscErr error // why this host offers no runsc; nil when cfg.RunscPath is one
}

type sandbox struct {
	id      string
	engine  Engine
	pid     int
	network Network
	netns   string        // the namespace it joined when the caller gave one (Spec.Netns)
	exited  chan struct{} // closed once init has been reaped
	exit    Exit
	// checkpointing: a checkpoint is stopping init, so its exit is no death (Exit.Checkpointed).
	checkpointing atomic.Bool
	// lazy serves its memory after a lazy restore, until every page is in; nil otherwise.
	lazy *lazyPages
	// memLimit is a runsc sandbox's memory limit, below its host cgroup's (0: none, or runc).
	memLimit int64
}

type idLock struct {
	mu   sync.Mutex
	refs int
}

var _ Runtime = (*Runc)(nil)

// NewRunc returns the runc driver, or an error naming what the machine lacks (see Detect).
func NewRunc(ctx context.Context, cfg Config) (*Runc, error) {
	if cfg.DataDir == "" {
		return nil, fmt.Errorf("%w: runc driver needs a data dir", ErrInvalid)
	}
	if cfg.RuncPath == "" {
		cfg.RuncPath = "runc"
	}
	if cfg.RuncRoot == "" {
		cfg.RuncRoot = "/run/cove/runc"
	}
	if cfg.NetnsDir == "" {
		cfg.NetnsDir = "/run/cove/netns"
	}
	if cfg.CgroupParent == "" {
		cfg.CgroupParent = "/cove"
	}
	if cfg.NoFile == 0 {
		cfg.NoFile = DefaultNoFile
	}
	if cfg.RunscRoot == "" {
		cfg.RunscRoot = "/run/cove/runsc"
	}
	var err error
	if cfg.DefaultEngine, err = ParseEngine(string(cfg.DefaultEngine)); err != nil {
		return nil, err
	}
	if !filepath.IsAbs(cfg.CgroupParent) {
		return nil, fmt.Errorf("%w: cgroup parent %q must be absolute", ErrInvalid, cfg.CgroupParent)
	}
	host := Detect(ctx, cfg.RuncPath)
	if err := host.Err(); err != nil {
		return nil, fmt.Errorf("runc driver unavailable: %w", err)
	}
	cfg.RuncPath = host.Runc
	var runscErr error
	if cfg.RunscPath, runscErr = findRunsc(ctx, cfg.RunscPath); runscErr != nil && cfg.DefaultEngine == EngineRunsc {
		return nil, fmt.Errorf("runtime engine runsc unavailable: %w", runscErr)
	}
	if cfg.DataDir, err = filepath.Abs(cfg.DataDir); err != nil {
		return nil, err
	}
	dirs := []string{cfg.DataDir, cfg.RuncRoot, cfg.NetnsDir}
	if runscErr == nil {
		dirs = append(dirs, cfg.RunscRoot)
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("runc driver: %w", err)
		}
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return nil, fmt.Errorf("runc driver: become child subreaper: %w", err)
	}
	// A create's runc then moves its init into the sandbox's cgroups in 0.07 ms, not 7.
	if _, err := FavorDynMods(); err != nil {
		telemetry.Logger(ctx).Warn("cgroup mount not tuned for creates", telemetry.KeyError, err.Error())
	}
	if err := weighParent(cfg.CgroupParent); err != nil {
		telemetry.Logger(ctx).Warn("sandboxes' parent cgroup keeps the CPU weight of one task", telemetry.KeyError, err.Error())
	}
	log := telemetry.Logger(ctx)
	if runscErr != nil {
		log.Debug("runtime engine runsc unavailable", telemetry.KeyError, runscErr.Error())
	}
	log.Info("runtime ready", telemetry.KeyRuntimeEngine, cfg.DefaultEngine.String())
	return &Runc{
		cfg:       cfg,
		seccomp:   host.Seccomp && !cfg.NoSeccomp,
		sandboxes: map[string]*sandbox{},
		locks:     map[string]*idLock{},
		runscErr:  runscErr,
	}, nil
}

func (r *Runc) dir(id string) string        { return filepath.Join(r.cfg.DataDir, id) }
func (r *Runc) netnsPath(id string) string  { return filepath.Join(r.cfg.NetnsDir, id) }
func (r *Runc) cgroupPath(id string) string { return filepath.Join(r.cfg.CgroupParent, id) }

// NetnsPath is where the sandbox's network namespace is pinned (for `nsenter --net=`): the
// one it joined (Spec.Netns), or its own.
func (r *Runc) NetnsPath(id string) string {
	if sb := r.get(id); sb != nil && sb.netns != "" {
		return sb.netns
	}
	return r.netnsPath(id)
}

// UpperDir is the overlay's upper directory: everything the sandbox wrote. It is on the
// sandbox's own disk when it has a disk limit.
func (r *Runc) UpperDir(id string) string {
	if upper := filepath.Join(r.dir(id), diskDir, "upper"); exists(upper) {
		return upper
	}
	return filepath.Join(r.dir(id), "upper")
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// CgroupPath is the sandbox's absolute cgroup path, the same in every hierarchy.
func (r *Runc) CgroupPath(id string) string { return r.cgroupPath(id) }

// lock serialises operations on one sandbox id.
func (r *Runc) lock(id string) (unlock func()) {
	r.mu.Lock()
	l := r.locks[id]
	if l == nil {
		l = &idLock{}
		r.locks[id] = l
	}
	l.refs++
	r.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		r.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(r.locks, id)
		}
		r.mu.Unlock()
	}
}

func (r *Runc) get(id string) *sandbox {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sandboxes[id]
}

func validate(s Spec) error {
	if err := ValidID(s.ID); err != nil {
		return err
	}
	if len(s.Args) == 0 {
		return fmt.Errorf("%w: %s: no init command", ErrInvalid, s.ID)
	}
	if !filepath.IsAbs(s.Rootfs) {
		return fmt.Errorf("%w: %s: rootfs %q is not an absolute path", ErrInvalid, s.ID, s.Rootfs)
	}
	if fi, err := os.Stat(s.Rootfs); err != nil || !fi.IsDir() {
		return fmt.Errorf("%w: %s: rootfs %q is not a directory", ErrInvalid, s.ID, s.Rootfs)
	}
	for _, l := range s.Layers {
		if !filepath.IsAbs(l) || strings.ContainsAny(l, ":,") {
			return fmt.Errorf("%w: %s: layer %q must be an absolute path without ':' or ','", ErrInvalid, s.ID, l)
		}
	}
	switch s.Network {
	case "", NetworkLoopback, NetworkHost:
	default:
		return fmt.Errorf("%w: %s: unknown network %q", ErrInvalid, s.ID, s.Network)
	}
	for _, b := range s.Binds { // a host path stays out of these: the target may be a user's
		if !filepath.IsAbs(b.Source) || !filepath.IsAbs(b.Target) {
			return fmt.Errorf("%w: %s: bind onto %s needs absolute paths", ErrInvalid, s.ID, b.Target)
		}
		if _, err := os.Stat(b.Source); err != nil {
			return fmt.Errorf("%w: %s: bind onto %s: its source is missing", ErrInvalid, s.ID, b.Target)
		}
	}
	return nil
}

// Create implements Runtime.
func (r *Runc) Create(ctx context.Context, s Spec) (_ *Sandbox, err error) {
	if err := validate(s); err != nil {
		return nil, err
	}
	if s.Limits.NoFile == 0 {
		s.Limits.NoFile = r.cfg.NoFile
	}
	unlock := r.lock(s.ID)
	defer unlock()
	dir := r.dir(s.ID)
	engine := s.Engine
	if s.Reboot {
		engine = bundleEngine(dir) // the kept sandbox's
	} else if engine == "" {
		engine = r.cfg.DefaultEngine
	}
	if err := r.EngineErr(engine); err != nil {
		return nil, fmt.Errorf("create %s: %w", s.ID, err)
	}
	if s.Reboot {
		if r.runs(s.ID) {
			return nil, fmt.Errorf("create %s: %w", s.ID, ErrExists)
		}
	} else if err := os.Mkdir(dir, 0o700); err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("create %s: %w", s.ID, ErrExists)
		}
		return nil, fmt.Errorf("create %s: %w", s.ID, err)
	}
	defer func() {
		if err != nil {
			if derr := r.destroy(context.WithoutCancel(ctx), s.ID); derr != nil {
				err = errors.Join(err, fmt.Errorf("clean up: %w", derr))
			}
		}
	}()

	root := s.Rootfs
	layers := dir
	if s.Reboot {
		if layers, s.Netns, err = r.reuseKept(s.ID, s.Limits.DiskBytes); err != nil {
			return nil, err
		}
	} else if !s.Direct && s.Limits.DiskBytes > 0 {
		if layers, err = mountDisk(r.cfg.DataDir, dir, s.Limits.DiskBytes); err != nil {
			return nil, fmt.Errorf("create %s: %w", s.ID, err)
		}
	}
	if s.Restore != "" {
		// The checkpoint's files go where the overlay's upper dir will be: on the sandbox's
		// own disk when it has one (a copy past its size fails like a write would).
		if err := copyTree(filepath.Join(s.Restore, "upper"), filepath.Join(layers, "upper")); err != nil {
			return nil, fmt.Errorf("create %s: copy the checkpoint's files: %w", s.ID, err)
		}
	}
	if !s.Direct {
		root = filepath.Join(dir, "rootfs")
		if err := mountOverlay(append(append([]string(nil), s.Layers...), s.Rootfs), layers, root); err != nil {
			return nil, fmt.Errorf("create %s: %w", s.ID, err)
		}
		if err := prepareRoot(root, s.ID); err != nil {
			return nil, fmt.Errorf("create %s: prepare root: %w", s.ID, err)
		}
	}
	if err := checkBindTargets(root, s.Binds); err != nil {
		return nil, fmt.Errorf("create %s: %w", s.ID, err)
	}
	netns := s.Netns
	if s.Network != NetworkHost && netns == "" {
		netns = r.netnsPath(s.ID)
		if err := createNetns(netns); err != nil {
			return nil, fmt.Errorf("create %s: netns: %w", s.ID, err)
		}
	}
	// The sentry enforces the profile itself (--oci-seccomp), whatever libseccomp runc has.
	spec := ociSpec(s, root, netns, r.cgroupPath(s.ID), r.seccomp || engine == EngineRunsc && !r.cfg.NoSeccomp)
	if spec.Annotations == nil {
		spec.Annotations = map[string]string{}
	}
	spec.Annotations[engineAnnotation] = string(engine)
	if engine == EngineRunc {
		spec.Annotations["org.criu.config"] = r.criuConfigPath() // runc hands it to CRIU at a checkpoint
	} else {
		runscSpec(spec)
	}
	cfg, err := json.MarshalIndent(spec, "", "  ")
	if s.Reboot {
		cfg, err = os.ReadFile(filepath.Join(dir, "config.json")) // the stopped sandbox's: its binds, env, limits, network
	}
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o600); err != nil {
		return nil, fmt.Errorf("create %s: %w", s.ID, err)
	}

	outR, outW, err := openStdio()
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", s.ID, err)
	}
	errR, errW, err := openStdio()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, fmt.Errorf("create %s: %w", s.ID, err)
	}
	logFile := filepath.Join(dir, "runc.log")
	pidFile := filepath.Join(dir, "init.pid")
	verb := []string{"create"}
	if s.Start {
		verb = []string{"run", "--detach"} // one runc process instead of create, then start
	}
	if s.Restore != "" && engine == EngineRunsc {
		verb = []string{"restore", "--detach", "--image-path", filepath.Join(s.Restore, "checkpoint")}
	} else if s.Restore != "" {
		if err := os.Mkdir(r.criuWorkDir(s.ID), 0o700); err != nil {
			return nil, fmt.Errorf("create %s: %w", s.ID, err)
		}
		verb = []string{"restore", "--detach", "--image-path", filepath.Join(s.Restore, "checkpoint"), "--work-path", r.criuWorkDir(s.ID)}
	}
	bin, global, err := r.cli(engine)
	if err != nil {
		outR.Close()
		errR.Close()
		outW.Close()
		errW.Close()
		return nil, fmt.Errorf("create %s: %w", s.ID, err)
	}
	args := append(append(global, "--log", logFile, "--log-format", "json"), verb...)
	cmd := exec.CommandContext(ctx, bin, append(args, "--bundle", dir, "--pid-file", pidFile, s.ID)...)
	// runc hands its own stdio to the init process: the pipes' write ends live on only there.
	cmd.Stdout, cmd.Stderr = outW, errW
	if engine == EngineRunsc {
		releaseStdio(dir) // a reboot's: its processes are gone
		err := recordStdio(dir, outW, errW)
		if err == nil {
			err = holdStdio(dir, outR, errR)
		}
		if err != nil {
			outR.Close()
			errR.Close()
			outW.Close()
			errW.Close()
			return nil, fmt.Errorf("create %s: %w", s.ID, err)
		}
	}
	runErr := cmd.Run()
	outW.Close()
	errW.Close()
	if runErr != nil {
		outR.Close()
		errR.Close()
		return nil, fmt.Errorf("create %s: %s %s: %w: %s%s", s.ID, engine, verb[0], runErr, runcLogErrors(logFile), criuLogErrors(filepath.Join(r.criuWorkDir(s.ID), "restore.log")))
	}
	pid, err := readPid(pidFile)
	if err != nil {
		outR.Close()
		errR.Close()
		return nil, fmt.Errorf("create %s: %w", s.ID, err)
	}
	if s.Restore != "" && engine == EngineRunc { // gVisor's hostname is the sentry's own: the fork keeps its source's
		if err := setHostname(pid, s.ID); err != nil {
			outR.Close()
			errR.Close()
			return nil, fmt.Errorf("create %s: hostname: %w", s.ID, err)
		}
	}
	var memLimit int64
	if engine == EngineRunsc {
		r.reapGofer(s.ID)
		// The sentry sized itself to the spec's limit when runsc started it: now the host
		// cgroup gets the headroom that keeps envd, the sandbox's OOM killer, ahead of the
		// host's.
		if memLimit = configMemoryLimit(cfg); memLimit > 0 {
			if err := raiseRunscMemory(r.cgroupPath(s.ID), memLimit); err != nil {
				outR.Close()
				errR.Close()
				return nil, fmt.Errorf("create %s: %w", s.ID, err)
			}
		}
	}
	sb := &sandbox{id: s.ID, engine: engine, pid: pid, network: s.Network, netns: s.Netns, exited: make(chan struct{}), memLimit: memLimit}
	if err := r.reap(sb); err != nil {
		outR.Close()
		errR.Close()
		return nil, fmt.Errorf("create %s: %w", s.ID, err)
	}
	r.mu.Lock()
	r.sandboxes[s.ID] = sb
	r.mu.Unlock()
	return &Sandbox{ID: s.ID, Pid: pid, Stdout: outR, Stderr: errR}, nil
}

// reap waits for the sandbox's init in the background. The init is this process's child (we
// are its subreaper), so waiting both yields the exit status and removes the zombie.
func (r *Runc) reap(sb *sandbox) error {
	proc, err := os.FindProcess(sb.pid)
	if err != nil {
		return fmt.Errorf("find init %d: %w", sb.pid, err)
	}
	cgroup := r.cgroupPath(sb.id)
	go func() {
		defer close(sb.exited)
		st, err := proc.Wait()
		sb.exit = Exit{Code: -1, At: time.Now(), OOMKilled: oomKills(cgroup) > 0, Checkpointed: sb.checkpointing.Load()}
		if err != nil {
			sb.exit.Signal = "unknown: " + err.Error()
			return
		}
		ws := st.Sys().(syscall.WaitStatus)
		switch {
		case ws.Exited():
			sb.exit.Code = ws.ExitStatus()
		case ws.Signaled():
			sb.exit.Signal = unix.SignalName(ws.Signal())
		}
	}()
	return nil
}

// mountOverlay mounts the sandbox's root on merged: lowers (topmost first) read-only under
// the upper and work dirs in layers (its own disk, when it has one).
func mountOverlay(lowers []string, layers, merged string) error {
	upper, work := filepath.Join(layers, "upper"), filepath.Join(layers, "work")
	for _, d := range []string{upper, work, merged} {
		if err := os.Mkdir(d, 0o755); err != nil && !(d == upper && errors.Is(err, os.ErrExist)) { // a restore's upper is copied in
			return err
		}
	}
	// The overlay's options show in the sandbox's /proc/self/mountinfo as they were given:
	// naming each directory by a descriptor of ours (/proc/self/fd/N) keeps the host's paths
	// out of the sandbox's sight. The kernel holds the directories themselves once mounted.
	var fds []int
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	name := func(dir string) (string, error) {
		fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return "", fmt.Errorf("open overlay layer %s: %w", dir, err)
		}
		fds = append(fds, fd)
		return fmt.Sprintf("/proc/self/fd/%d", fd), nil
	}
	var lowerNames []string
	for _, l := range lowers {
		n, err := name(l)
		if err != nil {
			return err
		}
		lowerNames = append(lowerNames, n)
	}
	upperName, err := name(upper)
	if err != nil {
		return err
	}
	workName, err := name(work)
	if err != nil {
		return err
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", strings.Join(lowerNames, ":"), upperName, workName)
	if err := unix.Mount("overlay", merged, "overlay", unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mount overlay on %s: %w", merged, err)
	}
	// mountinfo cannot say which layers a descriptor named: a record does (overlays.go).
	if err := recordOverlay(merged, lowers); err != nil {
		_ = unix.Unmount(merged, unix.MNT_DETACH)
		return fmt.Errorf("record overlay on %s: %w", merged, err)
	}
	return nil
}

// prepareRoot gives a fresh sandbox root a world-writable /tmp and an /etc/hosts naming it.
// It works on the host's view of a root a template author controls, so it follows no symlink:
// a /tmp or /etc/hosts that is one is replaced (in the upper layer), an /etc that is one refused.
func prepareRoot(root, id string) error {
	tmp := filepath.Join(root, "tmp")
	if fi, err := os.Lstat(tmp); err == nil && !fi.IsDir() {
		if err := os.Remove(tmp); err != nil {
			return err
		}
	}
	if err := os.Mkdir(tmp, 0o1777); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	if err := os.Chmod(tmp, 0o777|os.ModeSticky); err != nil {
		return err
	}
	etc := filepath.Join(root, "etc")
	if err := os.Mkdir(etc, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	if fi, err := os.Lstat(etc); err != nil || !fi.IsDir() {
		return fmt.Errorf("%w: the template's /etc is not a directory", ErrInvalid)
	}
	hostsPath := filepath.Join(etc, "hosts")
	if fi, err := os.Lstat(hostsPath); err == nil && !fi.Mode().IsRegular() {
		if err := os.Remove(hostsPath); err != nil {
			return err
		}
	}
	hosts := fmt.Sprintf("127.0.0.1\tlocalhost %s\n::1\tlocalhost ip6-localhost ip6-loopback\n", id)
	f, err := os.OpenFile(hostsPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|unix.O_NOFOLLOW, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteString(hosts)
	return errors.Join(err, f.Close())
}

// Start implements Runtime.
func (r *Runc) Start(ctx context.Context, id string) error {
	unlock := r.lock(id)
	defer unlock()
	if _, err := r.runc(ctx, r.engineOf(id), "start", id); err != nil {
		return fmt.Errorf("start %s: %w", id, err)
	}
	return nil
}

// freezePatience bounds how long Freeze waits for every task of a sandbox to stop.
const freezePatience = 10 * time.Second

// Freeze implements Runtime. Where the sandbox has a cgroup v1 freezer it freezes it itself
// and waits for FROZEN, up to freezePatience: runc's own loop thaws the cgroup every 50
// reads to let it settle and gives up after 1000 ("unable to freeze"), which under load
// (both cores busy, ten commands hashing files in the sandbox) it did five times in a row.
// Tasks need a moment of CPU each to stop, and a thaw loses what was gained. runc reads
// the freezer for its state, so `runc resume` and `runc state` see the pause all the same.
// Elsewhere it asks runc, trying again while runc gives up that way.
func (r *Runc) Freeze(ctx context.Context, id string) error {
	unlock := r.lock(id)
	defer unlock()
	ctx = telemetry.With(ctx, telemetry.KeySandboxID, id) // for the log lines; added unless carried
	if engine := r.engineOf(id); engine == EngineRunsc {
		// The sentry stops its own tasks; runsc state then says paused, as Adopt needs.
		if _, err := r.runc(ctx, engine, "pause", id); err != nil {
			return fmt.Errorf("freeze %s: %w", id, err)
		}
		return nil
	}
	dir := filepath.Join(cgroupRoot, "freezer", r.cgroupPath(id))
	if _, err := os.Stat(filepath.Join(dir, "freezer.state")); err == nil {
		if err := freezeV1(ctx, dir, freezePatience); err != nil {
			return fmt.Errorf("freeze %s: %w", id, err)
		}
		return nil
	}
	for try := 0; ; try++ {
		_, err := r.runc(ctx, r.engineOf(id), "pause", id)
		if err == nil {
			return nil
		}
		if !strings.Contains(err.Error(), "unable to freeze") || try == len(freezeRetries) {
			return fmt.Errorf("freeze %s (try %d): %w", id, try+1, err)
		}
		telemetry.Logger(ctx).WarnContext(ctx, "freeze did not take; trying again",
			telemetry.KeyTry, try+1, telemetry.KeyRetryInMS, freezeRetries[try].Milliseconds(), telemetry.KeyError, err.Error())
		select {
		case <-ctx.Done():
			return fmt.Errorf("freeze %s (try %d): %w", id, try+1, errors.Join(err, context.Cause(ctx)))
		case <-time.After(freezeRetries[try]):
		}
	}
}

// freezeRetries are the waits before each new try of a runc pause that gave up.
var freezeRetries = []time.Duration{20 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond}

// freezeV1 writes FROZEN to the v1 freezer cgroup dir and reads freezer.state (each read
// has the kernel check the tasks again) until it says FROZEN; FROZEN is written again on
// each round for any task that slipped past. Past patience, or when ctx ends, it thaws the
// cgroup back and says how long it waited and in which state.
func freezeV1(ctx context.Context, dir string, patience time.Duration) error {
	file := filepath.Join(dir, "freezer.state")
	begun := time.Now()
	nextLook := begun.Add(execLook)
	for wait := 100 * time.Microsecond; ; wait = min(2*wait, 10*time.Millisecond) {
		if err := os.WriteFile(file, []byte("FROZEN"), 0); err != nil {
			return errors.Join(err, thawV1(file))
		}
		b, err := os.ReadFile(file)
		if err != nil {
			return errors.Join(err, thawV1(file))
		}
		state := strings.TrimSpace(string(b))
		if state == "FROZEN" {
			if waited := time.Since(begun); waited > 100*time.Millisecond {
				telemetry.Logger(ctx).InfoContext(ctx, "freeze took long", telemetry.KeyWaitedMS, waited.Milliseconds())
			}
			return nil
		}
		if time.Since(begun) > patience || ctx.Err() != nil {
			err := fmt.Errorf("cgroup freezer still %s after %v%s", state, time.Since(begun).Round(time.Millisecond), unfrozenTasks(dir))
			return errors.Join(err, context.Cause(ctx), thawV1(file))
		}
		if now := time.Now(); now.After(nextLook) {
			nextLook = now.Add(execLook)
			// A task exec'ing waits (in D, unfreezable) for its other threads to exit,
			// which the freezer stopped first: the freeze can never take. A thaw lets them
			// exit and the exec finish; the next round freezes again. (Only then: a thaw
			// loses what the freeze gained.)
			if pid := execWaiting(dir); pid != "" {
				telemetry.Logger(ctx).InfoContext(ctx, "freeze met an exec waiting for its frozen threads; thawing for it", telemetry.KeyPID, pid)
				if err := thawV1(file); err != nil {
					return err
				}
				time.Sleep(time.Millisecond)
				continue
			}
		}
		time.Sleep(wait)
	}
}

// execLook is how long a freeze waits before it looks for a task stuck in an exec (and
// again between looks).
const execLook = 100 * time.Millisecond

// execWaiting returns a task of the freezer cgroup dir that waits in an exec for its other
// threads to exit (begin_new_exec's de_thread), "" when none does.
func execWaiting(dir string) string {
	for pid, wchan := range taskWchans(dir) {
		if wchan == "begin_new_exec" || wchan == "de_thread" {
			return pid
		}
	}
	return ""
}

// taskWchans yields each task of the freezer cgroup dir with where it waits (its wchan; "" when
// unreadable): the walk execWaiting and unfrozenTasks both make.
func taskWchans(dir string) iter.Seq2[string, string] {
	return func(yield func(string, string) bool) {
		b, err := os.ReadFile(filepath.Join(dir, "tasks"))
		if err != nil {
			return
		}
		for _, pid := range strings.Fields(string(b)) {
			wchan, _ := os.ReadFile("/proc/" + pid + "/wchan")
			if !yield(pid, string(wchan)) {
				return
			}
		}
	}
}

// unfrozenTasks names, for a freeze that did not take, the tasks of the freezer cgroup dir
// that are not in the refrigerator: their pid, command, state and where they wait (wchan),
// such as "; not frozen: 1234 (sleep) D in folio_wait_bit". At most five are named. It is a
// diagnosis: a task a kernel since 6.1 froze in place, where it slept, reads D at its own
// wait channel and is named too.
func unfrozenTasks(dir string) string {
	var out []string
	for pid, wchan := range taskWchans(dir) {
		if wchan == "__refrigerator" || wchan == "do_freezer_trap" {
			continue
		}
		stat, err := os.ReadFile("/proc/" + pid + "/stat")
		if err != nil {
			continue // it exited meanwhile
		}
		// pid (comm) state ...: comm may hold spaces and parentheses, so cut at the last ')'.
		desc := pid
		if open, end := strings.IndexByte(string(stat), '('), strings.LastIndexByte(string(stat), ')'); open > 0 && end > open {
			desc += " " + string(stat[open:end+1])
			if f := strings.Fields(string(stat[end+1:])); len(f) > 0 {
				desc += " " + f[0]
			}
		}
		if wchan != "" && wchan != "0" {
			desc += " in " + wchan
		}
		if out = append(out, desc); len(out) == 5 {
			break
		}
	}
	if len(out) == 0 {
		return ""
	}
	return "; not frozen: " + strings.Join(out, ", ")
}

func thawV1(file string) error { return os.WriteFile(file, []byte("THAWED"), 0) }

// Thaw implements Runtime.
func (r *Runc) Thaw(ctx context.Context, id string) error {
	unlock := r.lock(id)
	defer unlock()
	if _, err := r.runc(ctx, r.engineOf(id), "resume", id); err != nil {
		return fmt.Errorf("thaw %s: %w", id, err)
	}
	return nil
}

// Wait implements Runtime.
func (r *Runc) Wait(ctx context.Context, id string) (Exit, error) {
	sb := r.get(id)
	if sb == nil {
		return Exit{}, fmt.Errorf("wait %s: %w", id, ErrNotFound)
	}
	select {
	case <-sb.exited:
		return sb.exit, nil
	case <-ctx.Done():
		return Exit{}, context.Cause(ctx)
	}
}

// State implements Runtime.
func (r *Runc) State(ctx context.Context, id string) (State, error) {
	out, err := r.runc(ctx, r.engineOf(id), "state", id)
	if err != nil {
		return StateUnknown, fmt.Errorf("state %s: %w", id, err)
	}
	var st struct {
		Status string `json:"status"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return StateUnknown, fmt.Errorf("state %s: %w", id, err)
	}
	switch s := State(st.Status); s {
	case StateCreated, StateRunning, StatePaused, StateStopped:
		return s, nil
	}
	return StateUnknown, nil
}

// Stats implements Runtime.
func (r *Runc) Stats(ctx context.Context, id string) (Stats, error) {
	s, err := readStats(r.cgroupPath(id))
	if err != nil {
		return s, fmt.Errorf("stats %s: %w", id, err)
	}
	if sb := r.get(id); sb != nil && sb.memLimit > 0 {
		s.MemoryLimit = uint64(sb.memLimit) // the sandbox's, not its host cgroup's with the headroom
	}
	return s, nil
}

// Dial implements Runtime.
func (r *Runc) Dial(ctx context.Context, id, network, address string) (net.Conn, error) {
	netns := r.netnsPath(id)
	if sb := r.get(id); sb != nil && sb.network == NetworkHost {
		var d net.Dialer
		return d.DialContext(ctx, network, address)
	} else if sb != nil && sb.netns != "" {
		netns = sb.netns
	}
	c, err := dialInNetns(ctx, netns, network, address)
	if err != nil {
		return nil, fmt.Errorf("dial %s in %s: %w", address, id, err)
	}
	return c, nil
}

// Destroy implements Runtime.
func (r *Runc) Destroy(ctx context.Context, id string) error {
	if err := ValidID(id); err != nil {
		return err
	}
	unlock := r.lock(id)
	defer unlock()
	return r.destroy(ctx, id)
}

// destroy tears a sandbox down from whatever state it is in, including half-created. Each step
// tolerates its part being gone already, so destroy is idempotent and also cleans up after a
// crashed server.
func (r *Runc) destroy(ctx context.Context, id string) error {
	var errs []error
	if engine := r.engineOf(id); engine == EngineRunsc {
		// The sandbox's processes live in the sentry: delete --force kills the sandbox
		// process (paused or not) and its gofer, and removes runsc's state.
		if _, err := r.runc(ctx, engine, "delete", "--force", id); err != nil && !errors.Is(err, ErrNotFound) {
			errs = append(errs, err)
		}
		releaseStdio(r.dir(id))
	} else {
		// Stop everything at once before runc even starts: a fork bomb that keeps the CPUs
		// busy would otherwise slow runc's own start and its walk over the tasks.
		thaw := haltCgroup(r.cgroupPath(id))
		// kill --all freezes, signals and thaws, so it also kills a frozen sandbox; init's death
		// then takes the rest of its pid namespace with it.
		if _, err := r.runc(ctx, engine, "kill", "--all", id, "KILL"); err != nil && !errors.Is(err, ErrNotFound) && !notRunning(err) {
			errs = append(errs, err)
		}
		thaw() // the killed tasks die once thawed
		if _, err := r.runc(ctx, engine, "delete", "--force", id); err != nil && !errors.Is(err, ErrNotFound) {
			errs = append(errs, err)
		}
	}
	if sb := r.get(id); sb != nil {
		select {
		case <-sb.exited:
		case <-time.After(5 * time.Second):
			errs = append(errs, fmt.Errorf("init %d did not exit", sb.pid))
		}
		r.mu.Lock()
		delete(r.sandboxes, id)
		r.mu.Unlock()
	}
	if err := removeNetns(r.netnsPath(id)); err != nil {
		errs = append(errs, err)
	}
	dir := r.dir(id)
	mounted := false
	for _, m := range []string{"rootfs", diskDir} { // the overlay, then the disk under it
		if err := unmount(filepath.Join(dir, m)); err != nil {
			errs = append(errs, err)
			mounted = true
			break
		}
	}
	if err := removeCgroups(r.cgroupPath(id)); err != nil {
		errs = append(errs, err)
	}
	// A checkpoint is the biggest thing a sandbox leaves: it goes even when a mount that
	// is still busy keeps the rest of the directory for the next start to clean up.
	for _, d := range []string{r.checkpointDir(id), r.criuWorkDir(id)} {
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, err)
		}
	}
	if !mounted {
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("destroy %s: %w", id, err)
	}
	return nil
}

// unmount unmounts path if something is mounted there, lazily if it is still busy.
func unmount(path string) error {
	err := unix.Unmount(path, 0)
	if errors.Is(err, unix.EBUSY) {
		err = unix.Unmount(path, unix.MNT_DETACH)
	}
	if err == nil || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
		forgetOverlay(path)
		return nil
	}
	return fmt.Errorf("unmount %s: %w", path, err)
}

// List returns the ids of sandboxes that have a directory under the data dir, including those
// a previous server left behind, so that a starting server can destroy them.
func (r *Runc) List(ctx context.Context) ([]string, error) {
	entries, err := os.ReadDir(r.cfg.DataDir)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range entries {
		if e.IsDir() && ValidID(e.Name()) == nil {
			ids = append(ids, e.Name())
		}
	}
	return ids, nil
}

// runc runs one subcommand of engine's CLI (runc or runsc, see cli) and returns its stdout;
// errors carry its stderr, and ErrNotFound when the container does not exist.
func (r *Runc) runc(ctx context.Context, engine Engine, args ...string) ([]byte, error) {
	bin, global, err := r.cli(engine)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", engine, args[0], err)
	}
	cmd := exec.CommandContext(ctx, bin, append(global, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if strings.Contains(msg, "does not exist") || strings.Contains(msg, "not found") && engine == EngineRunsc {
			return nil, fmt.Errorf("%s %s: %w", engine, args[0], ErrNotFound)
		}
		return nil, fmt.Errorf("%s %s: %w: %s", engine, args[0], err, msg)
	}
	return out, nil
}

func notRunning(err error) bool {
	return strings.Contains(err.Error(), "not running") || strings.Contains(err.Error(), "stopped")
}

// runcLogErrors returns the error messages of a JSON runc log.
func runcLogErrors(file string) string {
	f, err := os.Open(file)
	if err != nil {
		return "(no runc log)"
	}
	defer f.Close()
	var msgs []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		var l struct{ Level, Msg string }
		if json.Unmarshal(s.Bytes(), &l) == nil && (l.Level == "error" || l.Level == "fatal") {
			msgs = append(msgs, l.Msg)
		}
	}
	return strings.Join(msgs, "; ")
}

func readPid(file string) (int, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, fmt.Errorf("read pid file: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("pid file %s: bad pid %q", file, b)
	}
	return pid, nil
}
