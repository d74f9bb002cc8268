package server

import (
	"context"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/covetest"
)

// A second server on a data dir in use must refuse to start, and must not touch the first
// server's sandboxes (it would otherwise kill them as orphans during recovery).
func TestOneServerPerDataDir(t *testing.T) {
	s := covetest.Start(t, "")
	c := client{t: t, url: s.URL, key: s.Key}
	id := c.create(nil)

	t.Run("a second server on the same data dir refuses to start and says why", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, covetest.Binary(t), "server", "--data", s.DataDir,
			"--templates", covetest.Templates(t), "--addr", "127.0.0.1:0", "--no-build")
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Fatalf("the second server exited 0; output:\n%s", out)
		}
		if ctx.Err() != nil {
			t.Fatalf("the second server did not exit within 2 minutes; output:\n%s", out)
		}
		if !strings.Contains(string(out), "in use by another cove server") || !strings.Contains(string(out), "pid ") {
			t.Errorf("the refusal does not say the data dir is in use and by whom:\n%s", out)
		}
	})

	t.Run("the first server's sandbox is still running afterwards", func(t *testing.T) {
		code, out, _ := c.do(http.MethodGet, "/sandboxes/"+id, nil)
		if code != http.StatusOK || out["state"] != "running" {
			t.Fatalf("GET %s: %d %v, want 200 running", id, code, out)
		}
	})
}
