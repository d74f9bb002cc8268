package server

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/cove-dev/cove/internal/covetest"
	cove "github.com/cove-dev/cove/sdk"
)

// runscOr skips a test that needs gVisor's runsc where the repository has not built it.
func runscOr(t *testing.T) {
	t.Helper()
	_, self, _, _ := runtime.Caller(0)
	bin := filepath.Join(filepath.Dir(self), "..", "..", "bin", "runsc")
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("no bin/runsc (COVE_RUNSC=1 scripts/deps.sh builds the pinned gVisor): %v", err)
	}
	// The test's cove binary is built elsewhere: the server finds runsc on its PATH.
	t.Setenv("PATH", filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"))
}

// TestRunscSDKScenarios runs the npm SDK's server scenarios against a server whose sandboxes
// run on gVisor (--runtime runsc), and checks that gVisor, not the host's kernel, answers
// inside them.
func TestRunscSDKScenarios(t *testing.T) {
	runscOr(t)
	s := covetest.StartWith(t, "", covetest.Options{OnStop: "kill", Args: []string{"--runtime", "runsc"}})
	ctx := context.Background()
	c := cove.NewClient(cove.Config{APIURL: s.URL, APIKey: s.Key, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t.Run("gVisor answers the kernel's questions", func(t *testing.T) {
		sb, err := c.Create(ctx, cove.SandboxOptions{})
		if err != nil {
			t.Fatalf("create on runsc: %v\n%s", err, s.Logs())
		}
		defer sb.Kill(ctx)
		res, err := sb.Commands.Run(ctx, "uname -r; cat /proc/version")
		if err != nil {
			t.Fatal(err)
		}
		host, _ := os.ReadFile("/proc/sys/kernel/osrelease")
		if strings.Contains(res.Stdout, strings.TrimSpace(string(host))) || !strings.Contains(strings.ToLower(res.Stdout), "gvisor") {
			t.Fatalf("inside a runsc sandbox the kernel says %q; the host's is %q", res.Stdout, host)
		}
	})
	t.Run("the npm SDK's server scenarios", func(t *testing.T) {
		covetest.RunSDKScenarios(t, "server.test.mjs", s.URL, s.Key)
	})
	t.Run("the npm SDK's proxy scenarios", func(t *testing.T) {
		covetest.RunSDKScenarios(t, "proxy.test.mjs", s.URL, s.Key)
	})
}
