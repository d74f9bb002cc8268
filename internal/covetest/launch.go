package covetest

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/sandbox/network/nettest"
	"github.com/cove-dev/cove/internal/sandbox/runtime"
)

// BuildBinary builds ./cmd/cove into dir, for harnesses that start a server from TestMain
// (Binary is the per-test form).
func BuildBinary(dir string) (string, error) {
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	out := filepath.Join(dir, "cove")
	build := exec.Command("go", "build", "-o", out, "./cmd/cove")
	build.Dir = filepath.Dir(strings.TrimSpace(string(gomod)))
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/cove: %w\n%s", err, b)
	}
	return out, nil
}

// Process is a `cove server` started from TestMain: one server for a whole test package.
type Process struct {
	URL     string // http://127.0.0.1:PORT
	Key     string // the data dir's first API key
	DataDir string
	LogPath string // the server's stderr and its stdout progress lines

	cmd     *exec.Cmd
	exited  chan error
	logFile *os.File
	release func() // the network pool's reservation
}

// Launch starts cove on dataDir with the shared test templates, logging to logPath, and
// returns once it serves. The first run on a new machine builds the base template.
func Launch(cove, dataDir, logPath string) (*Process, error) {
	return LaunchWith(cove, dataDir, logPath)
}

// LaunchWith is Launch with more `cove server` flags (they win over covetest's own).
func LaunchWith(cove, dataDir, logPath string, args ...string) (*Process, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	p := &Process{DataDir: dataDir, LogPath: logPath, logFile: logFile, exited: make(chan error, 1)}
	pool, release, err := nettest.ReservePool()
	if err != nil {
		return nil, err
	}
	p.release = release
	// --on-stop kill: a test run leaves no sandbox behind for the next to adopt.
	p.cmd = exec.Command(cove, append([]string{"server", "--data", dataDir, "--templates", TemplatesDir(), "--addr", "127.0.0.1:0", "--on-stop", "kill"},
		append(NetworkArgs(pool), args...)...)...)
	// Pdeathsig: a test binary killed by -timeout must not leave the server running. It fires
	// when the starting thread exits, so TestMain's thread stays locked.
	goruntime.LockOSThread()
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	p.cmd.Stderr = logFile
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start cove server: %w", err)
	}
	go func() { p.exited <- p.cmd.Wait() }()
	up := make(chan string, 1)
	go func() { // progress lines go to the log too; the URL line is the signal
		sc := bufio.NewScanner(stdout)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(logFile, "stdout: "+line)
			if _, url, ok := strings.Cut(line, "==> Cove is up at "); ok && !sent {
				up <- strings.TrimSpace(url)
				sent = true
			}
		}
		_, _ = io.Copy(logFile, stdout)
	}()
	select {
	case p.URL = <-up:
	case err := <-p.exited:
		return nil, fmt.Errorf("cove server exited before it was up: %v (log: %s)", err, logPath)
	case <-time.After(10 * time.Minute):
		_ = p.Stop()
		return nil, fmt.Errorf("cove server not up after 10 minutes (log: %s)", logPath)
	}
	key, err := os.ReadFile(filepath.Join(dataDir, "initial-api-key"))
	if err != nil {
		_ = p.Stop()
		return nil, fmt.Errorf("read the API key the server made on first run: %w", err)
	}
	p.Key = strings.TrimSpace(string(key))
	return p, nil
}

// Stop sends SIGTERM, waits up to 30 s, then kills.
func (p *Process) Stop() error {
	defer p.logFile.Close()
	if p.release != nil {
		defer p.release()
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case err := <-p.exited:
		return err
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.exited
		return errors.New("cove server ignored SIGTERM for 30s: killed it")
	}
}

// PrintLog writes the last n lines of the server's log to w, after a failure.
func PrintLog(w io.Writer, logPath string, n int) {
	if logPath == "" {
		return
	}
	b, err := os.ReadFile(logPath)
	if err != nil {
		return
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		fmt.Fprintf(w, "cove server log %s (last %d of %d lines):\n", logPath, n, len(lines))
		lines = lines[len(lines)-n:]
	} else {
		fmt.Fprintf(w, "cove server log %s:\n", logPath)
	}
	fmt.Fprintln(w, strings.Join(lines, "\n"))
}

// SkipReason says why this machine cannot run whole-system tests, or "": they need root, a
// machine that can run runc sandboxes, and not -short. A missing runc is fine where apt-get
// can install it (cove server does on start).
func SkipReason() string {
	if testing.Short() {
		return "whole-system tests start cove server and real sandboxes: skipped under -short"
	}
	h := runtime.Detect(context.Background(), "")
	if !h.Root {
		return "cove server runs sandboxes with runc and needs root"
	}
	if h.Runc == "" {
		if _, err := exec.LookPath("apt-get"); err != nil {
			return "runc is not installed and apt-get is missing to install it (Debian package runc)"
		}
		return ""
	}
	if err := h.Err(); err != nil {
		return "this machine cannot run runc sandboxes: " + err.Error()
	}
	return ""
}

// Main is the TestMain of a package whose tests share one cove server. When the machine
// cannot run one, it sets *skip to why (the package's tests skip with it) and runs them.
// Otherwise it launches a server on dataDir ("" for a temp dir of its own, removed when the
// tests pass) (building cove unless bin names a binary), hands
// it to started, runs the tests, stops the server and prints its log when anything failed.
// It returns the exit code for os.Exit.
func Main(m *testing.M, name, dataDir, bin string, started func(*Process), skip *string) int {
	flag.Parse()
	if *skip = SkipReason(); *skip != "" {
		fmt.Fprintf(os.Stderr, "%s: skipping the tests that need a server: %s\n", name, *skip)
		return m.Run()
	}
	tmp, err := os.MkdirTemp("", "cove-"+name+"-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		return 1
	}
	if bin == "" {
		if bin, err = BuildBinary(tmp); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
			return 1
		}
	}
	if dataDir == "" {
		// A data dir of this run's own: two servers never share one (a test binary of
		// another checkout may run beside this one), and the template store they do
		// share (TemplatesDir) is kept between runs instead.
		dataDir = filepath.Join(tmp, "data")
	}
	logPath := filepath.Join(tmp, "server.log")
	p, err := Launch(bin, dataDir, logPath)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		PrintLog(os.Stderr, logPath, 400)
		return 1
	}
	fmt.Fprintf(os.Stderr, "%s: cove server at %s, data %s, log %s\n", name, p.URL, dataDir, logPath)
	started(p)
	code := m.Run()
	if err := p.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "%s: stop cove server: %v\n", name, err)
		code = 1
	}
	if code != 0 {
		PrintLog(os.Stderr, logPath, 400)
	} else {
		os.RemoveAll(tmp)
	}
	return code
}
