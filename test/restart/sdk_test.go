package restart

import (
	"bytes"
	"context"
	"os"
	osexec "os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/covetest"
	"github.com/cove-dev/cove/internal/sandbox/runtime"
)

// TestOfficialSDKAcrossACrash is the "done when" with the official npm e2b SDK: it
// pauses a sandbox holding a process with state only in memory and 32 MB in /dev/shm, the
// server is killed with SIGKILL and started again, and Sandbox.connect resumes it intact; a
// running sandbox survives the same crash; fork({ count: 2 }) and createSnapshot +
// Sandbox.create(snapshotId) give copies with the same memory. The scenario is
// test/compat/durable.mjs. It runs on each runtime.
func TestOfficialSDKAcrossACrash(t *testing.T) {
	covetest.Skip(t)
	covetest.EachRuntime(t, func(t *testing.T, engine runtime.Engine) {
		if engine == runtime.EngineRunc {
			skipWithoutCRIU(t) // runsc checkpoints by itself
		}
		node, compat := covetest.NodeSDK(t)
		s := covetest.StartWith(t, "", covetest.Options{OnStop: "keep"})
		phase := func(args ...string) string {
			t.Helper()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			cmd := osexec.CommandContext(ctx, node, append([]string{"durable.mjs"}, args...)...)
			cmd.Dir = compat
			cmd.Env = append(os.Environ(), "E2B_API_URL="+s.URL, "E2B_SANDBOX_URL="+s.URL, "E2B_API_KEY="+s.Key, "NO_COLOR=1")
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("node durable.mjs %s: %v\nstdout: %s\nstderr: %s", args[0], err, stdout.String(), stderr.String())
			}
			lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
			return lines[len(lines)-1]
		}
		state := phase("before")
		s.Crash()
		s.Restart()
		if got := phase("after", state); got != "ok" {
			t.Fatalf("node durable.mjs after: %q", got)
		}
	})
}
