package cli

import (
	"strings"
	"testing"

	"github.com/cove-dev/cove/internal/covetest"
)

func TestAFilesystemPauseFromTheCLI(t *testing.T) {
	srv := covetest.Start(t, "")
	c := newCLI(t, srv)
	id := c.create()
	c.ok("exec", id, "--", "sh -c 'echo kept > /tmp/mark'")
	c.ok("sandbox", "pause", id, "--kind", "filesystem")
	t.Run("explain says the pause kept only the files and how a resume goes", func(t *testing.T) {
		out := c.ok("explain", id).stdout
		for _, want := range []string{"paused without its memory", "paused       filesystem", "files kept", "MiB (memory dropped)"} {
			if !strings.Contains(out, want) {
				t.Errorf("explain lacks %q:\n%s", want, out)
			}
		}
	})
	t.Run("after a resume explain says it rebooted and the file is there", func(t *testing.T) {
		c.ok("sandbox", "resume", id)
		if out := c.ok("exec", id, "--", "cat /tmp/mark").stdout; strings.TrimSpace(out) != "kept" {
			t.Errorf("the file after the reboot: %q", out)
		}
		if out := c.ok("explain", id).stdout; !strings.Contains(out, "resumed      filesystem") || !strings.Contains(out, "rebooted (a cold boot") {
			t.Errorf("explain after the resume:\n%s", out)
		}
	})
}
