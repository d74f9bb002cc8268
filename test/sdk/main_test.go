package cove_test

import (
	"os"
	"testing"

	"github.com/cove-dev/cove/internal/covetest"
)

// server is the package's one `cove server`, shared by every test, on a data dir of the
// run's own ($COVE_SDK_TEST_DATA names one to keep); templates are the shared test store.
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
	return "" // covetest.Main makes one of the run's own
}

// TestMain runs the package against one server; $COVE_SDK_TEST_BIN names a cove binary
// built already (else ./cmd/cove is built).
func TestMain(m *testing.M) {
	os.Exit(covetest.Main(m, "sdk", dataDir(), os.Getenv("COVE_SDK_TEST_BIN"), func(p *covetest.Process) {
		server.URL, server.APIKey, server.DataDir, server.LogPath = p.URL, p.Key, p.DataDir, p.LogPath
	}, &server.skip))
}

// needServer skips t when the package cannot start a server here.
func needServer(t testing.TB) {
	t.Helper()
	if server.skip != "" {
		t.Skip(server.skip)
	}
}
