package e2e

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/covetest"
)

// TestOfficialSDK runs test/compat/server.test.mjs, the official npm e2b SDK's scenarios,
// against the package's server. The scenarios themselves live in that file.
func TestOfficialSDK(t *testing.T) {
	need(t)
	node, compat := covetest.NodeSDK(t, "../compat")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	if deadline, ok := t.Deadline(); ok {
		ctx, cancel = context.WithDeadline(context.Background(), deadline.Add(-10*time.Second))
	}
	defer cancel()

	cmd := exec.CommandContext(ctx, node, "--test", "--test-reporter=spec", "server.test.mjs")
	cmd.Dir = compat
	cmd.Env = append(os.Environ(),
		"E2B_API_URL="+server.URL,
		"E2B_SANDBOX_URL="+server.URL,
		"E2B_API_KEY="+server.APIKey,
		"NO_COLOR=1",
	)
	cmd.WaitDelay = 5 * time.Second
	out := covetest.NewLineLogger(t, "node: ")
	cmd.Stdout = out
	cmd.Stderr = out
	err := cmd.Run()
	out.Flush()
	if err != nil {
		t.Fatalf("node --test server.test.mjs: %v (the SDK scenarios above name what failed)", err)
	}
}
