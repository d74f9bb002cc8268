package build

import (
	"bufio"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cove-dev/cove/internal/builder/template"
	"github.com/cove-dev/cove/internal/sandbox/runtime"
)

// Builder builds templates into the catalog it embeds (template.Store), whose Get, List,
// tags and removal it so has too: a root from nothing (debootstrap) or from an image or a
// directory, layers of steps on a template (RUN steps in containers of rt), a start
// snapshot. What it builds reaches the catalog complete, through the catalog's NewTree,
// Publish and PublishLayer, or not at all.
type Builder struct {
	*template.Store
	rt      runtime.Runtime
	starter template.StartSnapshotter // takes start snapshots; nil: builds take none
	steps   sync.Map                  // id of a running RUN step in a StepNetwork → *runningStep
}

// New returns the builder of templates into ts. rt runs the RUN steps of builds; it may be
// nil for a builder that only debootstraps and imports.
func New(ts *template.Store, rt runtime.Runtime) *Builder {
	return &Builder{Store: ts, rt: rt}
}

func randomSuffix() string {
	b := make([]byte, 4)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// Spec describes a template to build.
type Spec struct {
	// Name of the new template.
	Name string
	// From is the template to start from; "" when Bootstrap makes the root.
	From string
	// Bootstrap makes the root the steps build on from nothing (a Debian debootstrapped,
	// cached as a root template of its own); it replaces From.
	Bootstrap *template.Bootstrap
	// Mirror is where Bootstrap downloads Debian from; the host's apt source for its suite
	// when empty. It is not part of any cache key: it says where, not what.
	Mirror string
	// Key names the definition the build makes (the base's BaseKey), recorded as the template's.
	Key string
	// Run are shell commands run in order, as root, inside a container on the new rootfs in
	// Network. The build fails at the first that exits non-zero.
	Run []string

	// Steps are the steps of a template built in layers on From, after Run (which become RUN
	// steps as root). A template with a From is always built in layers.
	Steps []template.Step
	// Files opens the archives COPY steps name.
	Files FileSource
	// StartCmd and ReadyCmd become the template's start command and ready check.
	StartCmd, ReadyCmd string
	// CPUCount and MemoryMB size the template's sandboxes (0: the server's default).
	CPUCount, MemoryMB int
	// Runtime is the engine the template's sandboxes must run on ("": its parent's, else the
	// server's default).
	Runtime string
	// Network is the network RUN steps reach the world through; nil is the host's (builds
	// an operator runs on the host). A team's builds run in the team's (Builds.SetSandbox).
	Network StepNetwork
	// Limits caps each RUN step's container; zero fields fall back to CPUCount and MemoryMB.
	Limits runtime.Limits
	// DiskImages is the directory, of this process alone, that keeps the formatted disk image
	// of each size Limits.DiskBytes gives the RUN steps; the store's layers directory when "".
	DiskImages string
	// Force rebuilds every step instead of reusing cached layers.
	Force bool
	// Replace lets the build replace a ready template of the same name (atomically, when the
	// build succeeds); without it such a build fails with ErrExists.
	Replace bool
	// Scope keeps COPY layers (and every layer above one) to builds of the same scope, the
	// team whose uploads they hold; RUN layers on a shared base are shared across scopes.
	Scope string
	// BuildID and TeamID are recorded in the template: the API build that made it, and its team.
	BuildID, TeamID string
	// Log receives every build log line with the step it belongs to ("base", "1".."n" for
	// the steps, "finalize"), as the build runs. A build with a Log keeps no build.log file:
	// its log is Log's to keep.
	Log func(step, line string)
}

// Build builds a template and returns it ready. Progress lines (the build's output, and one
// "==> step" line per step) go to progress, which may be nil, and to spec.Log or, without
// one, the template's build.log. A failed or cancelled build leaves no template; its
// build.log is kept at FailedLog(name).
func (s *Builder) Build(ctx context.Context, spec Spec, progress io.Writer) (_ *template.Template, err error) {
	if err := template.ValidName(spec.Name); err != nil {
		return nil, fmt.Errorf("build template: %w", err)
	}
	switch {
	case spec.From != "" && spec.Bootstrap != nil:
		return nil, fmt.Errorf("%w: build template %s: give a template to start from or a bootstrap, not both", template.ErrInvalid, spec.Name)
	case spec.From == "" && spec.Bootstrap == nil:
		return nil, fmt.Errorf("%w: build template %s: a template to start from (FROM) or a bootstrap (BOOTSTRAP) is required", template.ErrInvalid, spec.Name)
	case spec.Bootstrap != nil:
		if err := spec.Bootstrap.Validate(); err != nil {
			return nil, fmt.Errorf("build template %s: %w", spec.Name, err)
		}
		if err := ValidMirror(spec.Mirror); err != nil {
			return nil, fmt.Errorf("build template %s: %w", spec.Name, err)
		}
	default:
		if from, _ := template.SplitTag(spec.From); template.ValidName(from) != nil && !template.InternalName(spec.From) { // "name", "name:tag" or an image cache
			return nil, fmt.Errorf("build template %s: from: %w", spec.Name, template.ValidName(from))
		}
	}
	if (len(spec.Run) > 0 || len(spec.Steps) > 0) && s.rt == nil {
		return nil, fmt.Errorf("%w: build template %s: run steps need a runtime", template.ErrInvalid, spec.Name)
	}
	for i, st := range spec.Steps {
		if err := st.Validate(len(spec.Run) + i); err != nil {
			return nil, fmt.Errorf("build template %s: %w", spec.Name, err)
		}
	}
	if d, ok := spec.Files.(DirSource); ok {
		defer holdArchives(string(d), spec.Steps)() // retention leaves what the COPYs read
	}
	release, err := s.lockName(ctx, spec.Name)
	if err != nil {
		return nil, fmt.Errorf("build template %s: %w", spec.Name, err)
	}
	defer release()
	if old, err := s.Get(spec.Name); err == nil && !spec.Replace {
		return nil, fmt.Errorf("build template %s: %w", spec.Name, template.ErrExists)
	} else if err == nil && old.Root == "" {
		// Layers stand on a root's rootfs: replacing it would pull the ground from under them.
		if on := s.BuiltOn(spec.Name); on != "" {
			return nil, fmt.Errorf("%w: build template %s: template %s is built on it; remove that first", template.ErrInUse, spec.Name, on)
		}
	}
	start := time.Now()
	build, unlock, err := s.NewTree(spec.Name)
	if err != nil {
		return nil, fmt.Errorf("build template %s: %w", spec.Name, err)
	}
	defer unlock()
	// A build with a sink (an API build) has its log kept there, with its record in the
	// store, and nowhere else; a host build's log is a file beside its template.
	logPath := filepath.Join(build, "build.log")
	var logFile *os.File
	var logTo io.Writer = io.Discard
	if spec.Log == nil {
		if logFile, err = os.Create(logPath); err != nil {
			os.RemoveAll(build)
			return nil, fmt.Errorf("build template %s: %w", spec.Name, err)
		}
		logTo = logFile
	}
	out := &lineWriter{w: logTo, progress: progress, sink: spec.Log, step: "base", tail: &tailLines{n: 20}}
	defer func() {
		if err != nil {
			out.step = "finalize"
			out.Printf("==> build failed: %v", err)
		}
		if logFile != nil {
			logFile.Close()
		}
		if err != nil {
			if logFile != nil {
				failed := s.FailedLog(spec.Name)
				os.MkdirAll(filepath.Dir(failed), 0o755)
				if rerr := os.Rename(logPath, failed); rerr == nil {
					err = fmt.Errorf("%w (log: %s)", err, failed)
				}
			}
			if rerr := template.RemoveTree(build); rerr != nil {
				err = errors.Join(err, rerr)
			}
		}
	}()

	t := &template.Template{Name: spec.Name, Key: spec.Key, Run: spec.Run, BuildID: spec.BuildID, TeamID: spec.TeamID}
	if spec.Bootstrap != nil {
		root, res, err := s.bootstrapRoot(ctx, *spec.Bootstrap, spec.Mirror, out)
		if err != nil {
			return nil, fmt.Errorf("build template %s: %w", spec.Name, &StepError{Index: 0, Step: template.Step{Kind: "BOOTSTRAP", Args: spec.Bootstrap.Args()}, Err: err})
		}
		spec.From, t.Built = root.Name, []template.StepResult{res}
	}
	t.From = spec.From
	if err := s.buildSteps(ctx, spec, t, out); err != nil {
		return nil, fmt.Errorf("build template %s: %w", spec.Name, err)
	}
	if err := s.startSnapshot(ctx, build, t, spec.Force, out); err != nil {
		return nil, fmt.Errorf("build template %s: %w", spec.Name, err)
	}
	t.CreatedAt = time.Now().UTC()
	t.BuildTime = time.Since(start).Seconds()
	out.Printf("==> ready: %s, %d MB in %.1fs", spec.Name, t.SizeBytes>>20, t.BuildTime)
	if err := s.Publish(ctx, build, t, spec.Replace); err != nil {
		return nil, fmt.Errorf("build template %s: %w", spec.Name, err)
	}
	if spec.Replace && spec.From != "" {
		// The build it replaced may leave layers nothing uses; those sandboxes still stack are kept.
		if freed, err := s.FreeLayers(); err != nil {
			out.Printf("==> free unused layers: %v", err)
		} else if freed > 0 {
			out.Printf("==> freed %d KiB of layers nothing uses", freed>>10)
		}
	}
	if spec.Replace && spec.Bootstrap != nil {
		// A changed BOOTSTRAP line leaves the root the replaced build stood on.
		if freed, err := s.FreeRoots(); err != nil {
			out.Printf("==> free unused roots: %v", err)
		} else if freed > 0 {
			out.Printf("==> freed %d MiB of bootstrapped roots nothing uses", freed>>20)
		}
	}
	return s.Get(spec.Name)
}

// Import makes a template from a copy of a host directory (a rootfs made elsewhere).
func (s *Builder) Import(ctx context.Context, name, srcDir string, progress io.Writer) (*template.Template, error) {
	if fi, err := os.Stat(srcDir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("%w: import template %s: %s is not a directory", template.ErrInvalid, name, srcDir)
	}
	return s.importRoot(ctx, &template.Template{Name: name}, progress, func(rootfs string, out *lineWriter) error {
		out.Printf("==> import %s", srcDir)
		return copyTree(ctx, srcDir, rootfs, out)
	})
}

// importRoot makes the root template t (a full rootfs) from what fill puts in rootfs: in a
// hidden build directory, published complete under t.Name or not at all.
func (s *Builder) importRoot(ctx context.Context, t *template.Template, progress io.Writer, fill func(rootfs string, out *lineWriter) error) (_ *template.Template, err error) {
	if err := template.ValidName(t.Name); err != nil && !template.InternalName(t.Name) {
		return nil, fmt.Errorf("import template: %w", err)
	}
	start := time.Now()
	build, unlock, err := s.NewTree(t.Name)
	if err != nil {
		return nil, fmt.Errorf("import template %s: %w", t.Name, err)
	}
	defer unlock()
	defer func() {
		if err != nil {
			template.RemoveTree(build)
		}
	}()
	logFile, err := os.Create(filepath.Join(build, "build.log"))
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	out := &lineWriter{w: logFile, progress: progress}
	rootfs := filepath.Join(build, "rootfs")
	if err := fill(rootfs, out); err != nil {
		return nil, fmt.Errorf("import template %s: %w", t.Name, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	t.SizeBytes, t.CreatedAt, t.BuildTime = treeSize(rootfs), time.Now().UTC(), time.Since(start).Seconds()
	out.Printf("==> ready: %s, %d MB in %.1fs", t.Name, t.SizeBytes>>20, t.BuildTime)
	if err := s.Publish(ctx, build, t, false); err != nil {
		return nil, fmt.Errorf("import template %s: %w", t.Name, err)
	}
	return s.Lookup(t.Name)
}

// FailedLog is where the log of the last failed build of name is kept.
func (s *Builder) FailedLog(name string) string {
	return filepath.Join(s.Dir(), ".failed", name+".log")
}

func slim(rootfs string) error {
	globs := []string{
		"var/lib/apt/lists/*", "var/cache/apt/*.bin", "var/cache/apt/archives/*.deb",
		"usr/share/man/*", "usr/share/info/*", "var/log/*.log",
	}
	for _, g := range globs {
		matches, _ := filepath.Glob(filepath.Join(rootfs, g))
		for _, m := range matches {
			if filepath.Base(m) == "partial" || filepath.Base(m) == "lock" {
				continue
			}
			if err := os.RemoveAll(m); err != nil {
				return err
			}
		}
	}
	if err := keepOnly(filepath.Join(rootfs, "usr/share/doc"), func(p string) bool { return filepath.Base(p) == "copyright" }); err != nil {
		return err
	}
	return keepOnly(filepath.Join(rootfs, "usr/share/locale"), func(p string) bool { return filepath.Base(p) == "locale.alias" })
}

// keepOnly deletes every file under dir that keep rejects, and the directories left empty.
func keepOnly(dir string, keep func(path string) bool) error {
	var dirs []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.IsDir() {
			if p != dir {
				dirs = append(dirs, p)
			}
			return nil
		}
		if keep(p) {
			return nil
		}
		return os.Remove(p)
	})
	if err != nil {
		return err
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		os.Remove(dirs[i]) // fails, as intended, while something is kept inside
	}
	return nil
}

// runStep runs one shell command in a container whose root is rootfs itself, in cmd.Network
// (the host's when nil) so that package managers can download. It fails with an *ExitError
// when the command does not exit 0.
func (s *Builder) runStep(ctx context.Context, rootfs string, cmd shellCmd, out *lineWriter) error {
	id := "build-" + randomSuffix()
	out.startStep(out.step) // the error's last lines are this command's
	env := append([]string{"DEBIAN_FRONTEND=noninteractive"}, cmd.Env...)
	if cmd.Home != "" {
		env = append(env, "HOME="+cmd.Home)
	}
	spec := runtime.Spec{
		ID:      id,
		Rootfs:  rootfs,
		Direct:  true,
		Network: runtime.NetworkHost,
		Args:    []string{"/bin/sh", "-c", cmd.Cmd},
		Env:     env,
		Cwd:     cmd.Cwd,
		UID:     cmd.UID,
		GID:     cmd.GID,
		Limits:  cmd.Limits,
	}
	detach := func() {}
	if cmd.Network != nil {
		netns, resolv, err := cmd.Network.Attach(ctx, id)
		if err != nil {
			return fmt.Errorf("build step network: %w", err)
		}
		// Connections the step's network refuses become lines of its log (StepLog) until
		// Detach, which reports those not yet reported: after Destroy (deferred below), and
		// before a failure takes the step's last lines.
		step := cmd.Build
		step.ID = id
		s.steps.Store(id, &runningStep{step: step, out: out})
		var detached bool
		detach = func() {
			if !detached {
				detached = true
				cmd.Network.Detach(context.WithoutCancel(ctx), id)
				s.steps.Delete(id)
			}
		}
		defer detach()
		spec.Network, spec.Netns = runtime.NetworkLoopback, netns
		if fi, err := os.Lstat(filepath.Join(rootfs, "etc/resolv.conf")); resolv != "" && err == nil && fi.Mode().IsRegular() {
			spec.Binds = append(spec.Binds, runtime.Bind{Source: resolv, Target: "/etc/resolv.conf", ReadOnly: true})
		}
	}
	sb, err := s.rt.Create(ctx, spec)
	if err != nil {
		return err
	}
	defer s.rt.Destroy(context.WithoutCancel(ctx), id)
	var wg sync.WaitGroup
	for _, r := range []io.ReadCloser{sb.Stdout, sb.Stderr} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer r.Close()
			out.Copy(r)
		}()
	}
	if err := s.rt.Start(ctx, id); err != nil {
		return err
	}
	exit, err := s.rt.Wait(ctx, id)
	if err != nil {
		return err
	}
	// Background processes a step leaves behind die with the container: stop waiting for their output.
	if derr := s.rt.Destroy(context.WithoutCancel(ctx), id); derr != nil {
		return derr
	}
	wg.Wait()
	detach()
	if exit.OOMKilled || exit.Signal != "" || exit.Code != 0 {
		return &ExitError{Code: exit.Code, Signal: exit.Signal, OOMKilled: exit.OOMKilled, Tail: out.lastLines()}
	}
	return nil
}

// shellCmd is a build command and who runs it where.
type shellCmd struct {
	Cmd      string
	UID, GID uint32
	Home     string
	Cwd      string
	Env      []string
	Limits   runtime.Limits // the template's cpuCount and memoryMB; PIDs always bounded
	Network  StepNetwork    // nil: the host's
	Build    BuildStep      // the build it is a step of (ID is set by runStep)
}

// ExitError is a build command that failed: its exit status and its last output lines.
type ExitError struct {
	Code      int
	Signal    string
	OOMKilled bool
	Tail      []string
}

func (e *ExitError) Error() string {
	var what string
	switch {
	case e.OOMKilled:
		what = "killed by the OOM killer"
	case e.Signal != "":
		what = "killed by " + e.Signal
	default:
		what = fmt.Sprintf("exit status %d", e.Code)
	}
	if len(e.Tail) == 0 {
		return what
	}
	return what + "; last lines:\n" + strings.Join(e.Tail, "\n")
}

// copyTree copies src to dst preserving owners, modes, links and xattrs, sharing extents
// where the filesystem supports reflinks.
func copyTree(ctx context.Context, src, dst string, out *lineWriter) error {
	return command(ctx, out, "cp", "-a", "--reflink=auto", "--", src, dst)
}

// command runs a host command in its own process group (so cancelling kills the whole
// tree), with its output going to out.
func command(ctx context.Context, out *lineWriter, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive", "LC_ALL=C")
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	done := make(chan struct{})
	go func() {
		defer close(done)
		out.Copy(pr)
	}()
	err := cmd.Run()
	pw.Close()
	<-done
	if err != nil && ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return err
}

func treeSize(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// maxBuildLog bounds one build's log file: a step that prints without end fills the
// caller's progress, never the data dir. Build logs have no TTL: each lives and goes with
// its template (or is the one failed log kept per name).
const maxBuildLog = 64 << 20

// lineWriter writes whole lines to the build log (up to maxBuildLog bytes, or max when
// set), the caller's progress writer and its sink (with the step they belong to), keeping
// the last few for errors.
type lineWriter struct {
	mu       sync.Mutex
	w        io.Writer
	progress io.Writer
	written  int64
	max      int64 // maxBuildLog when 0
	cut      bool
	sink     func(step, line string)
	step     string // set between steps, never while one writes
	tail     *tailLines
}

func (l *lineWriter) line(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	limit := cmp.Or(l.max, maxBuildLog)
	switch {
	case l.written+int64(len(s))+1 <= limit:
		n, _ := io.WriteString(l.w, s+"\n")
		l.written += int64(n)
	case !l.cut:
		l.cut = true
		io.WriteString(l.w, fmt.Sprintf("==> build log cut at %d bytes: later output is not kept here\n", limit))
	}
	if l.progress != nil {
		io.WriteString(l.progress, s+"\n")
	}
	if l.sink != nil {
		l.sink(l.step, s)
	}
	if l.tail != nil {
		l.tail.add(s)
	}
}

// startStep makes the lines that follow belong to step, and forgets the tail.
func (l *lineWriter) startStep(step string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.step = step
	if l.tail != nil {
		l.tail.lines = nil
	}
}

// lastLines returns the last lines of the current step.
func (l *lineWriter) lastLines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.tail == nil {
		return nil
	}
	return append([]string(nil), l.tail.lines...)
}

// Printf writes one line.
func (l *lineWriter) Printf(format string, args ...any) { l.line(fmt.Sprintf(format, args...)) }

// Copy writes every line read from r.
func (l *lineWriter) Copy(r io.Reader) {
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 64<<10), 1<<20)
	for s.Scan() {
		l.line(strings.TrimRight(s.Text(), "\r"))
	}
	io.Copy(io.Discard, r) // an over-long line: keep the writer from blocking
}
