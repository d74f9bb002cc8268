package template

import (
	"bufio"
	"cmp"
	"context"
	"crypto/sha256"
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

	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/internal/runtime"
)

// DefaultSuite is the Debian suite base templates are bootstrapped from.
const DefaultSuite = "bookworm"

// DefaultInclude are the packages a base template adds to debootstrap's minbase: what E2B's
// default template offers commands run through envd (python with pip, git, curl, sudo for the
// user, ps and ip).
var DefaultInclude = []string{
	"bash", "coreutils", "procps", "iproute2", "python3", "python3-pip", "python-is-python3",
	"curl", "ca-certificates", "git", "sudo",
}

// baseSetup versions what bootstrap does to a base beyond installing DefaultInclude (the
// account, sudoers, pip's configuration, slimming). Bump it whenever that changes, so that
// BaseKey changes and cached bases are rebuilt.
const baseSetup = 2

// User is the unprivileged account every base template has, as E2B templates do.
const (
	UserName = "user"
	UserID   = 1000
	UserHome = "/home/user"
)

// Spec describes a template to build.
type Spec struct {
	// Name of the new template.
	Name string
	// From is the template to start from; "" bootstraps a Debian base.
	From string
	// Run are shell commands run in order, as root, inside a container on the new rootfs with
	// the host's network. The build fails at the first that exits non-zero.
	Run []string
	// Suite is the Debian suite of a base; DefaultSuite when empty.
	Suite string
	// Mirror is the Debian mirror of a base; the host's apt source for Suite when empty.
	Mirror string
	// Include are the packages a base adds to minbase; DefaultInclude when nil.
	Include []string

	// Steps are the steps of a template built in layers on From, after Run (which become RUN
	// steps as root). A template with a From is always built in layers.
	Steps []Step
	// Files opens the archives COPY steps name.
	Files FileSource
	// StartCmd and ReadyCmd become the template's start command and ready check.
	StartCmd, ReadyCmd string
	// CPUCount and MemoryMB size the template's sandboxes (0: the server's default).
	CPUCount, MemoryMB int
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
	// the steps, "finalize"), as the build runs.
	Log func(step, line string)
}

// Build builds a template and returns it ready. Progress lines (the build's output, and one
// "==> step" line per step) go to progress, which may be nil, and to the template's build.log.
// A failed or cancelled build leaves no template; its log is kept at FailedLog(name).
func (s *Store) Build(ctx context.Context, spec Spec, progress io.Writer) (_ *Template, err error) {
	if err := ValidName(spec.Name); err != nil {
		return nil, fmt.Errorf("build template: %w", err)
	}
	if spec.From != "" {
		if from, _ := SplitTag(spec.From); ValidName(from) != nil { // "name" or "name:tag"
			return nil, fmt.Errorf("build template %s: from: %w", spec.Name, ValidName(from))
		}
	}
	if (len(spec.Run) > 0 || len(spec.Steps) > 0) && s.rt == nil {
		return nil, fmt.Errorf("%w: build template %s: run steps need a runtime", ErrInvalid, spec.Name)
	}
	if spec.From == "" && len(spec.Steps) > 0 {
		return nil, fmt.Errorf("%w: build template %s: steps need a template to start from", ErrInvalid, spec.Name)
	}
	for i, st := range spec.Steps {
		if err := st.validate(len(spec.Run) + i); err != nil {
			return nil, fmt.Errorf("build template %s: %w", spec.Name, err)
		}
	}
	if spec.From != "" {
		release, err := s.lockName(ctx, spec.Name)
		if err != nil {
			return nil, fmt.Errorf("build template %s: %w", spec.Name, err)
		}
		defer release()
	}
	if _, err := s.Get(spec.Name); err == nil && !spec.Replace {
		return nil, fmt.Errorf("build template %s: %w", spec.Name, ErrExists)
	}
	start := time.Now()
	build := filepath.Join(s.dir, ".build-"+spec.Name+"-"+randomSuffix())
	if err := os.Mkdir(build, 0o755); err != nil {
		return nil, fmt.Errorf("build template %s: %w", spec.Name, err)
	}
	unlock, err := lockDir(build)
	if err != nil {
		os.RemoveAll(build)
		return nil, fmt.Errorf("build template %s: lock: %w", spec.Name, err)
	}
	defer unlock()
	logPath := filepath.Join(build, "build.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		os.RemoveAll(build)
		return nil, fmt.Errorf("build template %s: %w", spec.Name, err)
	}
	out := &lineWriter{w: logFile, progress: progress, sink: spec.Log, step: "base", tail: &tailLines{n: 20}}
	defer func() {
		if err != nil {
			out.step = "finalize"
			out.Printf("==> build failed: %v", err)
		}
		logFile.Close()
		if err != nil {
			failed := s.FailedLog(spec.Name)
			os.MkdirAll(filepath.Dir(failed), 0o755)
			if rerr := os.Rename(logPath, failed); rerr == nil {
				err = fmt.Errorf("%w (log: %s)", err, failed)
			}
			if rerr := removeTree(build); rerr != nil {
				err = errors.Join(err, rerr)
			}
		}
	}()

	t := &Template{Name: spec.Name, From: spec.From, Run: spec.Run, BuildID: spec.BuildID, TeamID: spec.TeamID}
	rootfs := filepath.Join(build, "rootfs")
	if spec.From == "" {
		t.Suite = spec.Suite
		if t.Suite == "" {
			t.Suite = DefaultSuite
		}
		t.Include = spec.Include
		if t.Include == nil {
			t.Include = DefaultInclude
			t.Key = BaseKey(t.Suite)
		}
		if err := bootstrap(ctx, rootfs, t.Suite, spec.Mirror, t.Include, out); err != nil {
			return nil, fmt.Errorf("build template %s: %w", spec.Name, err)
		}
		t.SizeBytes = treeSize(rootfs)
	} else {
		if err := s.buildSteps(ctx, spec, t, out); err != nil {
			return nil, fmt.Errorf("build template %s: %w", spec.Name, err)
		}
	}
	if err := s.startSnapshot(ctx, build, t, spec.Force, out); err != nil {
		return nil, fmt.Errorf("build template %s: %w", spec.Name, err)
	}
	t.CreatedAt = time.Now().UTC()
	t.BuildTime = time.Since(start).Seconds()
	if err := writeMeta(build, t); err != nil {
		return nil, fmt.Errorf("build template %s: %w", spec.Name, err)
	}
	out.Printf("==> ready: %s, %d MB in %.1fs", spec.Name, t.SizeBytes>>20, t.BuildTime)
	if err := s.publish(build, spec.Name, spec.Replace); err != nil {
		return nil, fmt.Errorf("build template %s: %w", spec.Name, err)
	}
	if spec.Replace && spec.From != "" {
		// The build it replaced may leave layers nothing uses; those sandboxes still stack are kept.
		if freed, err := s.gcLayers(); err != nil {
			out.Printf("==> free unused layers: %v", err)
		} else if freed > 0 {
			out.Printf("==> freed %d KiB of layers nothing uses", freed>>10)
		}
	}
	return s.Get(spec.Name)
}

// Import makes a template from a copy of a host directory (a rootfs made elsewhere).
func (s *Store) Import(ctx context.Context, name, srcDir string, progress io.Writer) (*Template, error) {
	if fi, err := os.Stat(srcDir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("%w: import template %s: %s is not a directory", ErrInvalid, name, srcDir)
	}
	return s.importRoot(ctx, &Template{Name: name}, progress, func(rootfs string, out *lineWriter) error {
		out.Printf("==> import %s", srcDir)
		return copyTree(ctx, srcDir, rootfs, out)
	})
}

// importRoot makes the root template t (a full rootfs) from what fill puts in rootfs: in a
// hidden build directory, published complete under t.Name or not at all.
func (s *Store) importRoot(ctx context.Context, t *Template, progress io.Writer, fill func(rootfs string, out *lineWriter) error) (_ *Template, err error) {
	if err := ValidName(t.Name); err != nil {
		return nil, fmt.Errorf("import template: %w", err)
	}
	start := time.Now()
	build := filepath.Join(s.dir, ".build-"+t.Name+"-"+randomSuffix())
	if err := os.Mkdir(build, 0o755); err != nil {
		return nil, err
	}
	unlock, err := lockDir(build)
	if err != nil {
		os.RemoveAll(build)
		return nil, fmt.Errorf("import template %s: lock: %w", t.Name, err)
	}
	defer unlock()
	defer func() {
		if err != nil {
			removeTree(build)
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
	if err := writeMeta(build, t); err != nil {
		return nil, err
	}
	out.Printf("==> ready: %s, %d MB in %.1fs", t.Name, t.SizeBytes>>20, t.BuildTime)
	if err := s.publish(build, t.Name, false); err != nil {
		return nil, fmt.Errorf("import template %s: %w", t.Name, err)
	}
	return s.Get(t.Name)
}

// FailedLog is where the log of the last failed build of name is kept.
func (s *Store) FailedLog(name string) string {
	return filepath.Join(s.dir, ".failed", name+".log")
}

// publish renames a finished build directory to its template name: the moment it becomes
// ready. With replace, a ready template of that name is swapped out in one rename and deleted.
func (s *Store) publish(build, name string, replace bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	final := filepath.Join(s.dir, name)
	if _, err := os.Lstat(final); err == nil {
		if !replace {
			return ErrExists
		}
		if err := unix.Renameat2(unix.AT_FDCWD, build, unix.AT_FDCWD, final, unix.RENAME_EXCHANGE); err != nil {
			return fmt.Errorf("replace %s: %w", name, err)
		}
		return removeTree(build) // now the old template
	}
	return os.Rename(build, final)
}

// bootstrap debootstraps a minbase Debian into rootfs, slims it and adds the user account.
func bootstrap(ctx context.Context, rootfs, suite, mirror string, include []string, out *lineWriter) error {
	out.Printf("==> host packages: debootstrap")
	if err := EnsureHostPackages(ctx, "debootstrap"); err != nil {
		return err
	}
	if mirror == "" {
		m, err := AptMirror(suite)
		if err != nil {
			return err
		}
		mirror = m
	}
	out.Printf("==> debootstrap %s (minbase + %s)", suite, strings.Join(include, ","))
	args := []string{"--variant=minbase"}
	if len(include) > 0 {
		args = append(args, "--include="+strings.Join(include, ","))
	}
	args = append(args, suite, rootfs, mirror)
	if err := command(ctx, out, "debootstrap", args...); err != nil {
		return fmt.Errorf("debootstrap: %w", err)
	}
	out.Printf("==> slim: drop apt lists, caches, docs, man pages, locales")
	if err := slim(rootfs); err != nil {
		return fmt.Errorf("slim: %w", err)
	}
	out.Printf("==> user %s (uid %d, home %s, passwordless sudo)", UserName, UserID, UserHome)
	if err := addUser(rootfs); err != nil {
		return fmt.Errorf("add user: %w", err)
	}
	if err := configure(rootfs); err != nil {
		return fmt.Errorf("configure: %w", err)
	}
	return nil
}

// BaseKey names the definition of a base built from suite with DefaultInclude: it changes
// whenever the suite, the packages or bootstrap's setup change. Caches of built bases (the
// test template store) keep one base per key, so a new definition is built afresh.
func BaseKey(suite string) string {
	if suite == "" {
		suite = DefaultSuite
	}
	h := sha256.Sum256(fmt.Appendf(nil, "%s\x00%s\x00%d", suite, strings.Join(DefaultInclude, ","), baseSetup))
	return suite + "-" + hex.EncodeToString(h[:6])
}

// configFiles are written into a base after debootstrap: the user's passwordless sudo (as
// in E2B templates), and pip allowed to install beside Debian's packages (PEP 668 would
// refuse `pip install` outside a venv, which E2B users do not expect).
var configFiles = []struct {
	path    string
	mode    os.FileMode
	content string
}{
	{"etc/sudoers.d/" + UserName, 0o440, UserName + " ALL=(ALL:ALL) NOPASSWD: ALL\n"},
	{"etc/pip.conf", 0o644, "[global]\nbreak-system-packages = true\n"},
}

func configure(rootfs string) error {
	for _, f := range configFiles {
		path := filepath.Join(rootfs, f.path)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, []byte(f.content), f.mode); err != nil {
			return err
		}
		if err := os.Chmod(path, f.mode); err != nil {
			return err
		}
	}
	return nil
}

// dpkgSlim keeps later package installs (template Run steps) as slim as the base.
const dpkgSlim = `# Cove templates carry no documentation or translations.
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
`

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
	if err := keepOnly(filepath.Join(rootfs, "usr/share/locale"), func(p string) bool { return filepath.Base(p) == "locale.alias" }); err != nil {
		return err
	}
	cfg := filepath.Join(rootfs, "etc/dpkg/dpkg.cfg.d")
	if err := os.MkdirAll(cfg, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(cfg, "cove-slim"), []byte(dpkgSlim), 0o644)
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

// addUser adds the unprivileged account by editing the account files, as useradd would.
func addUser(rootfs string) error {
	etc := filepath.Join(rootfs, "etc")
	lines := map[string]string{
		"passwd":  fmt.Sprintf("%s:x:%d:%d::%s:/bin/bash\n", UserName, UserID, UserID, UserHome),
		"group":   fmt.Sprintf("%s:x:%d:\n", UserName, UserID),
		"shadow":  fmt.Sprintf("%s:*:%d:0:99999:7:::\n", UserName, time.Now().Unix()/86400),
		"gshadow": fmt.Sprintf("%s:!::\n", UserName),
	}
	for file, line := range lines {
		path := filepath.Join(etc, file)
		old, err := os.ReadFile(path)
		if errors.Is(err, os.ErrNotExist) && (file == "shadow" || file == "gshadow") {
			continue
		}
		if err != nil {
			return err
		}
		if strings.HasPrefix(string(old), UserName+":") || strings.Contains(string(old), "\n"+UserName+":") {
			continue
		}
		if len(old) > 0 && old[len(old)-1] != '\n' {
			old = append(old, '\n')
		}
		fi, _ := os.Stat(path)
		if err := os.WriteFile(path, append(old, line...), fi.Mode().Perm()); err != nil {
			return err
		}
	}
	home := filepath.Join(rootfs, UserHome)
	if err := os.MkdirAll(home, 0o750); err != nil {
		return err
	}
	skel := filepath.Join(etc, "skel")
	if entries, err := os.ReadDir(skel); err == nil {
		for _, e := range entries {
			if b, err := os.ReadFile(filepath.Join(skel, e.Name())); err == nil && e.Type().IsRegular() {
				if err := os.WriteFile(filepath.Join(home, e.Name()), b, 0o644); err != nil {
					return err
				}
			}
		}
	}
	return filepath.WalkDir(home, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, UserID, UserID)
	})
}

// runStep runs one shell command in a container whose root is rootfs itself, with the host's
// network so that package managers can download. It fails with an *ExitError when the command
// does not exit 0.
func (s *Store) runStep(ctx context.Context, rootfs string, cmd shellCmd, out *lineWriter) error {
	id := "build-" + randomSuffix()
	out.startStep(out.step) // the error's last lines are this command's
	env := append([]string{"DEBIAN_FRONTEND=noninteractive"}, cmd.Env...)
	if cmd.Home != "" {
		env = append(env, "HOME="+cmd.Home)
	}
	sb, err := s.rt.Create(ctx, runtime.Spec{
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
	})
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
