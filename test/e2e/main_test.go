// Package e2e drives a real `cove server` end to end: the official npm e2b SDK, and Go
// clients over the REST API and the sandbox proxy, against real runc sandboxes.
//
// The one idea: TestMain builds cove once and starts ONE server for the whole package, on a
// data dir kept between runs ($COVE_E2E_DATA, default /var/lib/cove-e2e) so the base template
// is built once per machine. Every test makes its own sandboxes on it and kills them when it
// ends. The package skips, saying why, unless it runs as root on a machine where runc is
// installed or installable, and not under -short.
package e2e

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/cove-dev/cove/internal/covetest"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/runtime"
)

// server is the package's one `cove server`.
var server struct {
	URL     string // http://127.0.0.1:PORT
	APIKey  string
	DataDir string
	LogPath string
	tmp     string // the binary and the log; removed after a passing run
	Cove    string // the built binary
	// skip, when set, says why every test skips.
	skip string
}

// dataDir is where the server keeps state between runs.
func dataDir() string {
	if d := os.Getenv("COVE_E2E_DATA"); d != "" {
		return d
	}
	return "/var/lib/cove-e2e"
}

func TestMain(m *testing.M) {
	flag.Parse()
	server.skip = skipReason()
	if server.skip != "" {
		fmt.Fprintf(os.Stderr, "e2e: skipping every test: %s\n", server.skip)
		os.Exit(m.Run())
	}
	stop, err := startServer()
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		printLog()
		os.Exit(1)
	}
	code := m.Run()
	if err := stop(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: stop cove server: %v\n", err)
		code = 1
	}
	if code != 0 {
		printLog()
	} else {
		os.RemoveAll(server.tmp)
	}
	os.Exit(code)
}

// need skips t when the package cannot run here.
func need(t *testing.T) {
	t.Helper()
	if server.skip != "" {
		t.Skip(server.skip)
	}
}

// skipReason says why this machine cannot run the package, or "".
func skipReason() string {
	if testing.Short() {
		return "e2e tests start cove server and real sandboxes: skipped under -short"
	}
	h := runtime.Detect(context.Background(), "")
	if !h.Root {
		return "e2e tests run cove server, which needs root"
	}
	if h.Runc == "" {
		if _, err := exec.LookPath("apt-get"); err != nil {
			return "runc is not installed and apt-get is missing to install it (Debian package runc)"
		}
		return "" // cove server installs it on start
	}
	if err := h.Err(); err != nil {
		return "this machine cannot run runc sandboxes: " + err.Error()
	}
	return ""
}

// startServer builds cove, starts `cove server` on a free loopback port and waits for its
// "Cove is up at" line. The returned stop sends SIGTERM and waits.
func startServer() (stop func() error, err error) {
	tmp, err := os.MkdirTemp("", "cove-e2e-")
	if err != nil {
		return nil, err
	}
	server.tmp = tmp
	server.DataDir = dataDir()
	server.LogPath = filepath.Join(tmp, "server.log")
	server.Cove = filepath.Join(tmp, "cove")

	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return nil, fmt.Errorf("go env GOMOD: %w", err)
	}
	build := exec.Command("go", "build", "-o", server.Cove, "./cmd/cove")
	build.Dir = filepath.Dir(strings.TrimSpace(string(gomod)))
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build ./cmd/cove: %w\n%s", err, out)
	}

	logFile, err := os.Create(server.LogPath)
	if err != nil {
		return nil, err
	}
	// Share the test template store that make test builds once.
	templates := covetest.TemplatesDir()
	cmd := exec.Command(server.Cove, "server", "--data", server.DataDir, "--templates", templates, "--addr", "127.0.0.1:0")
	// Pdeathsig: a test binary killed by -timeout must not leave the server running. It
	// fires when the starting thread exits, so TestMain's thread stays locked.
	goruntime.LockOSThread()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = logFile
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start cove server: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	// Progress lines go to the log too; the URL line is the signal.
	up := make(chan string, 1)
	go func() {
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

	stop = func() error {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case err := <-exited:
			logFile.Close()
			return err
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
			logFile.Close()
			return errors.New("cove server ignored SIGTERM for 30s: killed it")
		}
	}
	// First run installs packages and builds the base template with debootstrap.
	select {
	case server.URL = <-up:
	case err := <-exited:
		return nil, fmt.Errorf("cove server exited before it was up: %v (log: %s)", err, server.LogPath)
	case <-time.After(10 * time.Minute):
		_ = stop()
		return nil, fmt.Errorf("cove server not up after 10 minutes (log: %s)", server.LogPath)
	}
	key, err := os.ReadFile(filepath.Join(server.DataDir, "initial-api-key"))
	if err != nil {
		_ = stop()
		return nil, fmt.Errorf("read the API key the server made on first run: %w", err)
	}
	server.APIKey = strings.TrimSpace(string(key))
	fmt.Fprintf(os.Stderr, "e2e: cove server at %s, data %s, log %s\n", server.URL, server.DataDir, server.LogPath)
	return stop, nil
}

// printLog prints the server's log (the last 400 lines) after a failure.
func printLog() {
	if server.LogPath == "" {
		return
	}
	b, err := os.ReadFile(server.LogPath)
	if err != nil {
		return
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 400 {
		fmt.Fprintf(os.Stderr, "e2e: cove server log %s (last 400 of %d lines):\n", server.LogPath, len(lines))
		lines = lines[len(lines)-400:]
	} else {
		fmt.Fprintf(os.Stderr, "e2e: cove server log %s:\n", server.LogPath)
	}
	fmt.Fprintln(os.Stderr, strings.Join(lines, "\n"))
}
