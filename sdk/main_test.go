package cove_test

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"github.com/cove-dev/cove/internal/covetest"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// server is the package's one `cove server`, shared by every test. It keeps its data dir
// between runs ($COVE_SDK_TEST_DATA, default /var/lib/cove-sdktest) so the base template
// is built once per machine (about 45 s on first run).
var server struct {
	URL     string
	APIKey  string
	DataDir string
	LogPath string
	skip    string // why every test that needs the server skips
}

func dataDir() string {
	if d := os.Getenv("COVE_SDK_TEST_DATA"); d != "" {
		return d
	}
	return "/var/lib/cove-sdktest"
}

func TestMain(m *testing.M) {
	flag.Parse()
	server.skip = skipReason()
	if server.skip != "" {
		fmt.Fprintf(os.Stderr, "sdk: skipping the tests that need a server: %s\n", server.skip)
		os.Exit(m.Run())
	}
	stop, err := startServer()
	if err != nil {
		fmt.Fprintf(os.Stderr, "sdk: %v\n", err)
		printLog()
		os.Exit(1)
	}
	code := m.Run()
	if err := stop(); err != nil {
		fmt.Fprintf(os.Stderr, "sdk: stop cove server: %v\n", err)
		code = 1
	}
	if code != 0 {
		printLog()
	}
	os.Exit(code)
}

// needServer skips t when the package cannot start a server here.
func needServer(t testing.TB) {
	t.Helper()
	if server.skip != "" {
		t.Skip(server.skip)
	}
}

func skipReason() string {
	if testing.Short() {
		return "they start cove server and real sandboxes: skipped under -short"
	}
	if os.Geteuid() != 0 {
		return "cove server runs sandboxes with runc and needs root"
	}
	if _, err := exec.LookPath("runc"); err != nil {
		if _, err := exec.LookPath("apt-get"); err != nil {
			return "runc is not installed and apt-get is missing to install it (Debian package runc)"
		}
	}
	return ""
}

// startServer builds ./cmd/cove, starts `cove server` on a free loopback port and waits
// for its "Cove is up at" line. stop sends SIGTERM and waits.
func startServer() (stop func() error, err error) {
	tmp, err := os.MkdirTemp("", "cove-sdktest-")
	if err != nil {
		return nil, err
	}
	server.DataDir = dataDir()
	server.LogPath = filepath.Join(tmp, "server.log")
	// $COVE_SDK_TEST_BIN names a cove binary built already; else ./cmd/cove is built.
	bin := os.Getenv("COVE_SDK_TEST_BIN")
	if bin == "" {
		bin = filepath.Join(tmp, "cove")
		gomod, err := exec.Command("go", "env", "GOMOD").Output()
		if err != nil {
			return nil, fmt.Errorf("go env GOMOD: %w", err)
		}
		build := exec.Command("go", "build", "-o", bin, "./cmd/cove")
		build.Dir = filepath.Dir(strings.TrimSpace(string(gomod)))
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("go build ./cmd/cove: %w\n%s", err, out)
		}
	}

	logFile, err := os.Create(server.LogPath)
	if err != nil {
		return nil, err
	}
	// Share the test template store that make test builds once.
	templates := covetest.TemplatesDir()
	cmd := exec.Command(bin, "server", "--data", server.DataDir, "--templates", templates, "--addr", "127.0.0.1:0")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
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
			return errors.New("cove server ignored SIGTERM for 30 s: killed it")
		}
	}
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
	fmt.Fprintf(os.Stderr, "sdk: cove server at %s, data %s, log %s\n", server.URL, server.DataDir, server.LogPath)
	return stop, nil
}

// printLog prints the end of the server's log after a failure.
func printLog() {
	if server.LogPath == "" {
		return
	}
	b, err := os.ReadFile(server.LogPath)
	if err != nil {
		return
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 200 {
		lines = lines[len(lines)-200:]
	}
	fmt.Fprintf(os.Stderr, "sdk: cove server log %s (last %d lines):\n%s\n", server.LogPath, len(lines), strings.Join(lines, "\n"))
}
