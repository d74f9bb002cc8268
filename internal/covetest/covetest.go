// Package covetest starts real `cove server` processes for whole-system tests: it builds the
// cove binary once per test binary, runs the server as a child on its own data dir with the
// shared test template store, and can crash, stop and restart it.
//
// The one idea: tests talk to Cove the way users do, over its port, with nothing faked.
package covetest

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/builder/template"
	"github.com/cove-dev/cove/internal/sandbox/network/nettest"
	"github.com/cove-dev/cove/internal/sandbox/runtime"
	"github.com/cove-dev/cove/templates"
)

// TemplatesEnv names the shared template store; TemplatesDefault is used when it is unset.
const (
	TemplatesEnv     = "COVE_TEST_TEMPLATES"
	TemplatesDefault = "/var/lib/cove-test-templates"
)

var build struct {
	once sync.Once
	path string
	err  error
}

// Binary builds ./cmd/cove once per test binary and returns its path.
func Binary(t testing.TB) string {
	t.Helper()
	build.once.Do(func() {
		out, err := exec.Command("go", "env", "GOMOD").Output()
		if err != nil {
			build.err = fmt.Errorf("go env GOMOD: %w", err)
			return
		}
		root := filepath.Dir(strings.TrimSpace(string(out)))
		dir, err := os.MkdirTemp("", "covetest-bin-")
		if err != nil {
			build.err = err
			return
		}
		build.path = filepath.Join(dir, "cove")
		cmd := exec.Command("go", "build", "-o", build.path, "./cmd/cove")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			build.err = fmt.Errorf("build cove: %v\n%s", err, b)
		}
	})
	if build.err != nil {
		t.Fatal(build.err)
	}
	return build.path
}

// Skip skips t unless the machine can run real sandboxes (see SkipReason).
func Skip(t testing.TB) {
	t.Helper()
	if reason := SkipReason(); reason != "" {
		t.Skip("covetest: " + reason)
	}
}

// TemplatesDir is the shared template store: the subdirectory of $COVE_TEST_TEMPLATES (or
// TemplatesDefault) named by the base's definition (templates.BaseKey), so that a machine whose
// cached base was built from an older definition builds the new one beside it.
func TemplatesDir() string {
	root := os.Getenv(TemplatesEnv)
	if root == "" {
		root = TemplatesDefault
	}
	return filepath.Join(root, templates.BaseKey())
}

// Templates returns the shared template store, building the base template there first when
// it is missing (about a minute, once per machine).
func Templates(t testing.TB) string {
	t.Helper()
	dir := TemplatesDir()
	if _, err := os.Stat(filepath.Join(dir, "base", "meta.json")); err == nil {
		return dir
	}
	scratch := t.TempDir()
	cmd := exec.Command(Binary(t), "template", "build", "base", "--data", scratch, "--templates", dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		if _, serr := os.Stat(filepath.Join(dir, "base", "meta.json")); serr == nil {
			return dir // another test binary built it meanwhile (builds of one name take turns)
		}
		t.Fatalf("build the shared base template in %s: %v\n%s", dir, err, tail(out, 4000))
	}
	return dir
}

// OwnTemplates returns a new template store of the test's own whose base template is the
// shared one: symlinks to the shared base, the root it is built on and its layers. A server on
// it builds templates without writing to the shared store.
func OwnTemplates(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "templates")
	if err := template.Link(dir, Templates(t), templates.BaseName); err != nil {
		t.Fatal(err)
	}
	return dir
}

// NetworkArgs are the `cove server` flags that keep a test server's sandbox egress on this
// machine: the reserved pool, table and link names, the 198.18.0.0/15 limit, no DNS
// upstream, and no host-wide ip_forward.
//
// On a machine without the nft binary, test servers run with --network=false instead (the
// network tests skip there, through nettest).
func NetworkArgs(n nettest.Server) []string {
	if _, err := exec.LookPath("nft"); err != nil {
		return []string{"--network=false"}
	}
	return []string{"--network-pool", n.Pool.String(), "--network-table", n.Table, "--network-link-prefix", n.LinkPrefix,
		"--network-log-group", fmt.Sprint(n.LogGroup), "--network-egress-limit", nettest.Range.String(), "--network-dns", "none", "--network-ip-forward=false", "--network-warm", "2"}
}

// Server is a running `cove server`.
type Server struct {
	URL     string // http://127.0.0.1:PORT
	Key     string // an API key of the default team
	DataDir string

	// OnStop is the server's --on-stop (keep or kill), read at each start: Start makes it
	// kill, so that a test's cleanup leaves no sandbox behind; StartWith chooses.
	OnStop string

	t         testing.TB
	templates string
	args      []string // network flags and the caller's, kept across restarts
	netns     string   // the network namespace it runs in; the host's when ""
	cmd       *exec.Cmd
	logs      *Buffer
	exited    chan struct{}
}

// Start starts a server on dataDir (a new temporary one when ""), stopped at cleanup. Its
// stop kills its sandboxes (--on-stop kill).
func Start(t testing.TB, dataDir string) *Server {
	t.Helper()
	return StartWith(t, dataDir, Options{OnStop: "kill"})
}

// Options are a test server's settings.
type Options struct {
	// OnStop is --on-stop: "keep" (the product's default) leaves sandboxes running when the
	// server stops, for the next start to adopt; "kill" kills them.
	OnStop string
	// Args are extra `cove server` flags, kept across restarts.
	Args []string
	// Templates is the template store; the shared test store when "".
	Templates string
	// Netns, when set, is a pinned network namespace the server runs in (nsenter --net), as
	// a host of its own would: a cluster's nodes in tests.
	Netns string
}

// StartWithTemplates starts a server as Start does, on the template store templates.
func StartWithTemplates(t testing.TB, dataDir, templates string) *Server {
	t.Helper()
	return StartWith(t, dataDir, Options{OnStop: "kill", Templates: templates})
}

// StartWith starts a server as Start does, with o.
//
// Every test server's sandboxes have egress, made safe: their addresses come from a /24 of
// 198.19.0.0/16 reserved for this test, they may reach only 198.18.0.0/15 (the fake
// internets of internal/sandbox/network/nettest), and their DNS is answered REFUSED unless a test
// names a resolver inside a fake internet (--network-dns). Nothing leaves the machine.
// At cleanup a server that keeps its sandboxes is started once more with --on-stop kill and
// stopped, so nothing is left behind.
func StartWith(t testing.TB, dataDir string, o Options) *Server {
	t.Helper()
	Skip(t)
	if dataDir == "" {
		dataDir = t.TempDir()
	}
	templates := o.Templates
	if templates == "" {
		templates = Templates(t)
	}
	s := &Server{t: t, DataDir: dataDir, templates: templates, OnStop: o.OnStop, netns: o.Netns, args: append(NetworkArgs(nettest.ReserveServer(t)), o.Args...)}
	s.start()
	t.Cleanup(func() {
		s.Stop()
		if s.OnStop != "kill" {
			s.OnStop = "kill"
			s.start()
			s.Stop()
		}
		unmountVolumes(t, s.DataDir)
		if t.Failed() {
			t.Logf("cove server log (%s):\n%s", s.DataDir, tail(s.logs.Bytes(), 20000))
		}
	})
	return s
}

// unmountVolumes detaches the sized volumes' images a server left mounted in dataDir (a
// mount outlives the server, for the sandboxes the next one adopts), once no sandbox is left.
func unmountVolumes(t testing.TB, dataDir string) {
	mnts, _ := filepath.Glob(filepath.Join(dataDir, "volumes", "vol-*", "data"))
	for _, mnt := range mnts {
		if err := runtime.UnmountDisk(mnt); err != nil {
			t.Errorf("unmount a test server's volume: %v", err)
		}
	}
}

func (s *Server) start() {
	t := s.t
	t.Helper()
	if s.logs == nil {
		s.logs = &Buffer{} // kept across restarts: a test reads what every run logged
	}
	onStop := s.OnStop
	if onStop == "" {
		onStop = "keep"
	}
	cmd := exec.Command(Binary(t), append([]string{"server", "--data", s.DataDir, "--templates", s.templates,
		"--addr", "127.0.0.1:0", "--no-build", "--log-level", "debug", "--sample-interval", "500ms", "--on-stop", onStop}, s.args...)...)
	if s.netns != "" {
		// nsenter execs the server (the same pid: a signal reaches it), in the namespace only.
		cmd = exec.Command("nsenter", append([]string{"--net=" + s.netns, "--"}, cmd.Args...)...)
	}
	cmd.Stderr = s.logs
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s.cmd, s.exited = cmd, make(chan struct{})
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			s.logs.Write([]byte(line + "\n"))
			if u, ok := strings.CutPrefix(line, "==> Cove is up at "); ok {
				urls <- strings.TrimSpace(u)
			}
		}
		io.Copy(io.Discard, stdout)
	}()
	go func() { _ = cmd.Wait(); close(s.exited) }()
	select {
	case s.URL = <-urls:
	case <-s.exited:
		t.Fatalf("cove server exited before it was up:\n%s", tail(s.logs.Bytes(), 8000))
	case <-time.After(60 * time.Second):
		t.Fatalf("cove server not up after 60 s:\n%s", tail(s.logs.Bytes(), 8000))
	}
	key, err := os.ReadFile(filepath.Join(s.DataDir, "initial-api-key"))
	if err != nil {
		t.Fatalf("read the API key: %v", err)
	}
	s.Key = strings.TrimSpace(string(key))
}

// Logs returns what the server has logged so far (JSON lines on stderr, progress on stdout).
func (s *Server) Logs() string { return string(s.logs.Bytes()) }

// Stop stops the server gracefully (SIGTERM) and waits for it.
func (s *Server) Stop() { s.signal(syscall.SIGTERM) }

// Crash kills the server with SIGKILL, as a crash would, leaving its sandboxes behind.
func (s *Server) Crash() { s.signal(syscall.SIGKILL) }

func (s *Server) signal(sig syscall.Signal) {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	select {
	case <-s.exited:
		return
	default:
	}
	_ = s.cmd.Process.Signal(sig)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
		s.t.Errorf("cove server did not stop within 30 s of %s", sig)
	}
}

// Restart starts the server again on the same data dir, after Stop or Crash.
func (s *Server) Restart() {
	s.t.Helper()
	s.start()
}

// Buffer collects what a process writes while a test reads it: a server's log, a
// terminal's output. Safe for one writer and concurrent readers.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// Bytes returns a copy of what was written so far.
func (b *Buffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]byte(nil), b.buf.Bytes()...)
}

// String returns what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
