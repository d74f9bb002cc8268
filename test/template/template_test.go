// Package template_test drives template builds end to end: the official npm e2b SDK's
// Template builder against a real `cove server` on a template store of the test's own (its
// base is the shared one), then sandboxes from what it built.
package template_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/covetest"
)

func TestOfficialSDKBuildsTemplates(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cove server and node: skipped under -short")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not found on PATH: install Node.js 20+, then run scripts/deps.sh")
	}
	compat, err := filepath.Abs("../compat")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(compat, "node_modules", "e2b", "package.json")); err != nil {
		t.Skip("the e2b npm SDK is not installed in test/compat: run scripts/deps.sh (or npm ci there)")
	}
	server := covetest.StartWithTemplates(t, "", covetest.OwnTemplates(t))

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	if deadline, ok := t.Deadline(); ok {
		ctx, cancel = context.WithDeadline(context.Background(), deadline.Add(-10*time.Second))
	}
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--test", "--test-reporter=spec", "template.test.mjs")
	cmd.Dir = compat
	cmd.Env = append(os.Environ(), "E2B_API_URL="+server.URL, "E2B_SANDBOX_URL="+server.URL, "E2B_API_KEY="+server.Key, "NO_COLOR=1")
	cmd.WaitDelay = 5 * time.Second
	out := covetest.NewLineLogger(t, "node: ")
	cmd.Stdout, cmd.Stderr = out, out
	err = cmd.Run()
	out.Flush()
	if err != nil {
		t.Fatalf("node --test template.test.mjs: %v (the SDK scenarios above name what failed)", err)
	}
}
