package compat

import (
	"context"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/covetest"
)

// TestSDKWatchSeesUploadsWrite runs envdwatch.test.mjs: the SDK's watchDir sees WRITE for a
// file that files.write uploads, over an existing file and for a new one, as with E2B's envd.
func TestSDKWatchSeesUploadsWrite(t *testing.T) {
	if testing.Short() {
		t.Skip("compat test starts cove envd and node: skipped under -short")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not found on PATH: install Node.js 20+, then run `npm ci` in test/compat")
	}
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "e2b", "package.json")); err != nil {
		t.Skip("the e2b npm SDK is not installed: run `npm ci` (or `npm install`) in test/compat")
	}
	envdURL := startEnvd(t, buildCove(t))
	sandboxID := "i" + randomHex(t, 10)
	apiKey := "e2b_" + randomHex(t, 20)
	api := httptest.NewServer(fixtureControlPlane(t, sandboxID, apiKey))
	t.Cleanup(api.Close)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--test", "--test-reporter=spec", "envdwatch.test.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"E2B_API_URL="+api.URL,
		"E2B_SANDBOX_URL="+envdURL,
		"E2B_API_KEY="+apiKey,
		"COVE_SANDBOX_ID="+sandboxID,
		"NO_COLOR=1",
	)
	cmd.WaitDelay = 5 * time.Second
	out := covetest.NewLineLogger(t, "node: ")
	cmd.Stdout = out
	cmd.Stderr = out
	err = cmd.Run()
	out.Flush()
	if err != nil {
		t.Fatalf("node --test envdwatch.test.mjs: %v (the SDK scenarios above name what failed)", err)
	}
}
