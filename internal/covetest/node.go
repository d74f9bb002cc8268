package covetest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// RunSDKScenarios runs file, a node --test file of test/compat, with the official npm e2b
// SDK pointed at a Cove at url with key, and env added; the scenarios' output goes to the
// test log. It skips when node or the SDK is not installed, and fails the test when a
// scenario fails.
func RunSDKScenarios(t testing.TB, file, url, key string, env ...string) {
	t.Helper()
	node, compat := NodeSDK(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if deadline, ok := d.Deadline(); ok {
			ctx, cancel = context.WithDeadline(context.Background(), deadline.Add(-10*time.Second))
		}
	}
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--test", "--test-reporter=spec", file)
	cmd.Dir = compat
	cmd.Env = append(append(os.Environ(), "E2B_API_URL="+url, "E2B_SANDBOX_URL="+url, "E2B_API_KEY="+key, "NO_COLOR=1"), env...)
	cmd.WaitDelay = 5 * time.Second
	out := NewLineLogger(t, "node: ")
	cmd.Stdout, cmd.Stderr = out, out
	err := cmd.Run()
	out.Flush()
	if err != nil {
		t.Fatalf("node --test %s: %v (the SDK scenarios above name what failed)", file, err)
	}
}

// NodeSDK returns node and the directory test/compat, where the official npm e2b SDK is
// installed, or skips the test saying what is missing.
func NodeSDK(t testing.TB) (node, compat string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not found on PATH: install Node.js 20+, then run scripts/deps.sh")
	}
	_, self, _, _ := runtime.Caller(0)
	compat = filepath.Join(filepath.Dir(self), "..", "..", "test", "compat")
	if _, err := os.Stat(filepath.Join(compat, "node_modules", "e2b", "package.json")); err != nil {
		t.Skip("the e2b npm SDK is not installed in test/compat: run scripts/deps.sh (or npm ci there)")
	}
	return node, compat
}
