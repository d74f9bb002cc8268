// Package e2e drives a real `cove server` end to end: the official npm e2b SDK, and Go
// clients over the REST API and the sandbox proxy, against real runc sandboxes.
//
// The one idea: TestMain builds cove once and starts ONE server for the whole package, on a
// data dir of the run's own ($COVE_E2E_DATA names one to keep), with the machine's shared
// template store (covetest.TemplatesDir), so the base template is built once per machine. Every test makes its own sandboxes on it and kills them when it
// ends. The package skips, saying why, unless it runs as root on a machine where runc is
// installed or installable, and not under -short.
package e2e

import (
	"os"
	"testing"

	"github.com/cove-dev/cove/internal/covetest"
)

// server is the package's one `cove server`.
var server struct {
	URL     string // http://127.0.0.1:PORT
	APIKey  string
	DataDir string
	LogPath string
	// skip, when set, says why every test skips.
	skip string
}

// dataDir is where the server keeps its state: "" for a temp dir of the run's own.
func dataDir() string {
	if d := os.Getenv("COVE_E2E_DATA"); d != "" {
		return d
	}
	return "" // covetest.Main makes one of the run's own
}

func TestMain(m *testing.M) {
	os.Exit(covetest.Main(m, "e2e", dataDir(), "", func(p *covetest.Process) {
		server.URL, server.APIKey, server.DataDir, server.LogPath = p.URL, p.Key, p.DataDir, p.LogPath
	}, &server.skip))
}

// need skips t when the package cannot run here.
func need(t *testing.T) {
	t.Helper()
	if server.skip != "" {
		t.Skip(server.skip)
	}
}
