package server

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/covetest"
)

// TestTeamQuotaAnswers429 runs a server whose teams may hold one sandbox: the second create
// is a 429 in E2B's shape naming the limit (the official SDK raises RateLimitError), and
// killing the first makes room again.
func TestTeamQuotaAnswers429(t *testing.T) {
	s := covetest.StartWith(t, "", covetest.Options{OnStop: "kill", Args: []string{"--quota-sandboxes", "1"}})
	a := client{t: t, url: s.URL, key: s.Key}
	first := a.create(nil)
	code, body, _ := a.do(http.MethodPost, "/sandboxes", map[string]any{"templateID": "base"})
	t.Run("a create over the quota is 429 naming the limit and the request id", func(t *testing.T) {
		msg, _ := body["message"].(string)
		if code != http.StatusTooManyRequests || body["code"] != float64(429) ||
			!strings.Contains(msg, "over the team's limit of 1") || !strings.Contains(msg, "request id") {
			t.Errorf("%d %v", code, body)
		}
	})
	t.Run("the official SDK raises RateLimitError", func(t *testing.T) {
		node, err := exec.LookPath("node")
		if err != nil {
			t.Skip("node not found on PATH: install Node.js 20+, then run scripts/deps.sh")
		}
		compat, _ := filepath.Abs("../compat")
		if _, err := os.Stat(filepath.Join(compat, "node_modules", "e2b", "package.json")); err != nil {
			t.Skip("the e2b npm SDK is not installed in test/compat: run scripts/deps.sh")
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		script := `import { Sandbox, RateLimitError } from 'e2b'
try { await Sandbox.create('base'); console.log('created') } catch (e) {
  console.log(e instanceof RateLimitError ? 'RateLimitError: ' + e.message : 'other ' + e.name + ': ' + e.message) }`
		cmd := exec.CommandContext(ctx, node, "--input-type=module", "-e", script)
		cmd.Dir = compat
		cmd.Env = append(os.Environ(), "E2B_API_URL="+s.URL, "E2B_SANDBOX_URL="+s.URL, "E2B_API_KEY="+s.Key)
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.HasPrefix(string(out), "RateLimitError: ") || !strings.Contains(string(out), "limit of 1") {
			t.Errorf("node: %v\n%s", err, out)
		}
	})
	t.Run("killing a sandbox makes room for the next", func(t *testing.T) {
		if code, _, _ := a.do(http.MethodDelete, "/sandboxes/"+first, nil); code != http.StatusNoContent {
			t.Fatalf("kill: %d", code)
		}
		a.create(nil)
	})
}
