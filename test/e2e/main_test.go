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
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/cove-dev/cove/internal/covetest"

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

// startServer builds cove, starts `cove server` on a free loopback port and waits for it to
// serve. The returned stop sends SIGTERM and waits.
func startServer() (stop func() error, err error) {
	tmp, err := os.MkdirTemp("", "cove-e2e-")
	if err != nil {
		return nil, err
	}
	server.tmp = tmp
	server.DataDir = dataDir()
	server.LogPath = filepath.Join(tmp, "server.log")
	if server.Cove, err = covetest.BuildBinary(tmp); err != nil {
		return nil, err
	}
	p, err := covetest.Launch(server.Cove, server.DataDir, server.LogPath)
	if err != nil {
		return nil, err
	}
	server.URL, server.APIKey = p.URL, p.Key
	fmt.Fprintf(os.Stderr, "e2e: cove server at %s, data %s, log %s\n", server.URL, server.DataDir, server.LogPath)
	return p.Stop, nil
}

// printLog prints the server's log (the last 400 lines) after a failure.
func printLog() { covetest.PrintLog(os.Stderr, server.LogPath, 400) }
