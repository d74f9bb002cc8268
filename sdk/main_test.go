package cove_test

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/cove-dev/cove/internal/covetest"
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

// startServer builds ./cmd/cove (or takes $COVE_SDK_TEST_BIN), starts `cove server` on a
// free loopback port and waits for it to serve. stop sends SIGTERM and waits.
func startServer() (stop func() error, err error) {
	tmp, err := os.MkdirTemp("", "cove-sdktest-")
	if err != nil {
		return nil, err
	}
	server.DataDir = dataDir()
	server.LogPath = filepath.Join(tmp, "server.log")
	bin := os.Getenv("COVE_SDK_TEST_BIN")
	if bin == "" {
		if bin, err = covetest.BuildBinary(tmp); err != nil {
			return nil, err
		}
	}
	p, err := covetest.Launch(bin, server.DataDir, server.LogPath)
	if err != nil {
		return nil, err
	}
	server.URL, server.APIKey = p.URL, p.Key
	return p.Stop, nil
}

// printLog prints the server's log (the last 400 lines) after a failure.
func printLog() { covetest.PrintLog(os.Stderr, server.LogPath, 400) }
