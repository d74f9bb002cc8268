package cli

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/cove-dev/cove/internal/covetest"
)

func TestForkAndSnapshotVerbs(t *testing.T) {
	if out, err := exec.Command("criu", "--version").Output(); err != nil || !strings.Contains(string(out), "Version: 4") {
		t.Skipf("fork and snapshots need CRIU 4 (scripts/criu.sh builds it): %q %v", out, err)
	}
	srv := covetest.Start(t, "")
	c := newCLI(t, srv)
	sb := c.create()
	c.ok("exec", sb, "--", "sh -c 'echo from-the-parent > /tmp/mark'")

	t.Run("sandbox fork prints one id per copy and each copy has the parent's files", func(t *testing.T) {
		kids := strings.Fields(c.ok("sandbox", "fork", sb, "--count", "2", "--timeout", "2m").stdout)
		if len(kids) != 2 {
			t.Fatalf("fork printed %q, want two ids", kids)
		}
		for _, id := range kids {
			if out := c.ok("exec", id, "--", "cat /tmp/mark").stdout; strings.TrimSpace(out) != "from-the-parent" {
				t.Errorf("fork %s: /tmp/mark is %q", id, out)
			}
			c.ok("sandbox", "kill", id)
		}
	})
	t.Run("explain shows the pauses and restores with their kind, time and size", func(t *testing.T) {
		id := c.create()
		c.ok("sandbox", "pause", id)
		c.ok("sandbox", "resume", id)
		c.ok("sandbox", "pause", id, "--kind", "freeze")
		out := c.ok("explain", id).stdout
		for _, want := range []string{"pauses and restores:", "paused       snapshot", "resumed      snapshot", "paused       freeze", "MiB"} {
			if !strings.Contains(out, want) {
				t.Errorf("explain lacks %q:\n%s", want, out)
			}
		}
		if r := c.run("sandbox", "pause", id, "--kind", "nap"); r.code == 0 || !strings.Contains(r.stderr, "--kind") {
			t.Errorf("pause --kind nap: %s", r)
		}
	})
	t.Run("a volume outlives its sandbox, survives a snapshot pause, and is refused to delete while mounted", func(t *testing.T) {
		vol := strings.TrimSpace(c.ok("volume", "create", "cli-data").stdout)
		first := c.create("--volume", "cli-data:/mnt/data")
		c.ok("exec", first, "--", "sh -c 'echo kept > /mnt/data/f'")
		c.ok("sandbox", "kill", first)
		second := c.create("--volume", "cli-data:/mnt/data")
		if out := c.ok("exec", second, "--", "cat /mnt/data/f").stdout; strings.TrimSpace(out) != "kept" {
			t.Errorf("the volume in a second sandbox: %q", out)
		}
		c.ok("sandbox", "pause", second)
		c.ok("sandbox", "resume", second)
		if out := c.ok("exec", second, "--", "sh -c 'echo again >> /mnt/data/f; cat /mnt/data/f'").stdout; !strings.Contains(out, "kept\nagain") {
			t.Errorf("the volume after a snapshot pause: %q", out)
		}
		if r := c.run("volume", "rm", vol); r.code == 0 || !strings.Contains(r.stderr, "mounted") {
			t.Errorf("rm of a mounted volume: %s", r)
		}
		if r := c.run("sandbox", "fork", second); r.code == 0 || !strings.Contains(r.stderr, "volume cli-data read-write at /mnt/data") {
			t.Errorf("fork of a sandbox writing a volume: %s", r)
		}
		// A snapshot keeps the mounts: a sandbox from it mounts the volume again, read-write
		// once the writer is gone; a reader's forks mount it read-only.
		snap := strings.TrimSpace(c.ok("snapshot", "create", second).stdout)
		c.ok("sandbox", "kill", second)
		third := c.create("--template", snap)
		if out := c.ok("exec", third, "--", "sh -c 'echo third >> /mnt/data/f; cat /mnt/data/f'").stdout; !strings.Contains(out, "kept\nagain\nthird") {
			t.Errorf("the volume in a sandbox from the snapshot: %q", out)
		}
		reader := c.create("--volume", "cli-data:/mnt/data:ro")
		kids := strings.Fields(c.ok("sandbox", "fork", reader, "--count", "1").stdout)
		if len(kids) != 1 {
			t.Fatalf("fork of the reader printed %q", kids)
		}
		if out := c.ok("exec", kids[0], "--", "cat /mnt/data/f").stdout; !strings.Contains(out, "third") {
			t.Errorf("the volume in the reader's fork: %q", out)
		}
		if r := c.run("exec", kids[0], "--", "sh -c 'echo no > /mnt/data/no'"); r.code == 0 || !strings.Contains(r.stdout+r.stderr, "Read-only file system") {
			t.Errorf("a write in the fork's read-only mount: %s", r)
		}
		for _, id := range []string{third, reader, kids[0]} {
			c.ok("sandbox", "kill", id)
		}
		c.ok("volume", "rm", "cli-data")
		if out := c.ok("volume", "list").stdout; strings.Contains(out, vol) {
			t.Errorf("a deleted volume is listed: %q", out)
		}
		if r := c.run("sandbox", "create", "--template", snap); r.code == 0 || !strings.Contains(r.stderr, "was deleted") {
			t.Errorf("create from a snapshot whose volume is deleted: %s", r)
		}
		c.ok("snapshot", "rm", snap)
		if r := c.run("sandbox", "create", "--volume", "cli-data:/mnt/data"); r.code == 0 || !strings.Contains(r.stderr, "volume") {
			t.Errorf("create with a deleted volume: %s", r)
		}
	})
	t.Run("snapshot create, list, a sandbox from it, and rm", func(t *testing.T) {
		snap := strings.TrimSpace(c.ok("snapshot", "create", sb, "--name", "cli-snap").stdout)
		if !strings.HasPrefix(snap, "snap-") {
			t.Fatalf("snapshot create printed %q", snap)
		}
		if out := c.ok("snapshot", "list", "--name", "cli-snap").stdout; !strings.Contains(out, snap) {
			t.Errorf("snapshot list: %q, want %s", out, snap)
		}
		id := c.create("--template", snap)
		if out := c.ok("exec", id, "--", "cat /tmp/mark").stdout; strings.TrimSpace(out) != "from-the-parent" {
			t.Errorf("a sandbox from the snapshot: /tmp/mark is %q", out)
		}
		c.ok("snapshot", "rm", snap)
		if r := c.run("snapshot", "rm", snap); r.code == 0 || !strings.Contains(r.stderr, "not found") {
			t.Errorf("rm of a deleted snapshot: %s", r)
		}
	})
}
