package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cove-dev/cove/internal/covetest"
)

// TestVolumeVerbs drives a volume's files, size and mounts through the CLI: the content
// API's verbs, the quota's 507, one read-write mount and read-only ones beside it.
func TestVolumeVerbs(t *testing.T) {
	srv := covetest.Start(t, "")
	c := newCLI(t, srv)
	dir := t.TempDir()
	small := filepath.Join(dir, "small.txt")
	big := filepath.Join(dir, "big.bin")
	if err := os.WriteFile(small, []byte("from the cli\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(big, make([]byte, 20<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	vol := strings.TrimSpace(c.ok("volume", "create", "cli-files", "--size-mb", "16").stdout)
	t.Cleanup(func() { c.run("volume", "rm", vol) })

	t.Run("put, ls, cat, mkdir and rm work on the volume's files by its name", func(t *testing.T) {
		c.ok("volume", "put", "cli-files", small, "/docs/a.txt", "-p")
		if out := c.ok("volume", "ls", "cli-files").stdout; !strings.Contains(out, "/docs/") {
			t.Errorf("ls /: %q", out)
		}
		if out := c.ok("volume", "ls", "cli-files", "/", "--depth", "2").stdout; !strings.Contains(out, "/docs/a.txt") {
			t.Errorf("ls --depth 2: %q", out)
		}
		if out := c.ok("volume", "cat", "cli-files", "/docs/a.txt").stdout; out != "from the cli\n" {
			t.Errorf("cat: %q", out)
		}
		if r := c.run("volume", "mkdir", "cli-files", "/x/y"); r.code == 0 || !strings.Contains(r.stderr, "not found") {
			t.Errorf("mkdir without -p: %s", r)
		}
		c.ok("volume", "mkdir", "cli-files", "/x/y", "-p")
		c.ok("volume", "rm", "cli-files", "/x")
		if r := c.run("volume", "cat", "cli-files", "/x/y"); r.code == 0 || !strings.Contains(r.stderr, "not found") {
			t.Errorf("cat of a removed path: %s", r)
		}
		if r := c.run("volume", "cat", "cli-files", "../../etc/passwd"); r.code == 0 || !strings.Contains(r.stderr, "leads out of the volume") {
			t.Errorf("cat out of the volume: %s", r)
		}
	})
	t.Run("an upload past the size is refused and ls shows size and use", func(t *testing.T) {
		if r := c.run("volume", "put", "cli-files", big, "/big.bin"); r.code == 0 || !strings.Contains(r.stderr, "16 MiB") && !strings.Contains(r.stderr, "holds at most") {
			t.Errorf("put of 20 MiB into 16: %s", r)
		}
		out := c.ok("volume", "ls").stdout
		if !strings.Contains(out, "cli-files") || !strings.Contains(out, "16.0 MiB") {
			t.Errorf("volume ls: %q", out)
		}
	})
	t.Run("one read-write mount at a time, read-only ones beside it see its writes and cannot write", func(t *testing.T) {
		writer := c.create("--volume", "cli-files:/mnt/v")
		if r := c.run("sandbox", "create", "--volume", "cli-files:/mnt/v"); r.code == 0 || !strings.Contains(r.stderr, "cli-files") || !strings.Contains(r.stderr, writer) {
			t.Errorf("a second read-write mount: %s", r)
		}
		reader := c.create("--volume", "cli-files:/mnt/v:ro")
		if out := c.ok("sandbox", "info", reader).stdout; !strings.Contains(out, "cli-files:/mnt/v:ro") {
			t.Errorf("sandbox info of the reader: %q", out)
		}
		c.create("--volume", "cli-files:/mnt/v:ro")
		c.ok("exec", writer, "--", "sh -c 'echo fresh > /mnt/v/new'")
		if out := c.ok("exec", reader, "--", "cat /mnt/v/new").stdout; out != "fresh\n" {
			t.Errorf("the reader sees %q", out)
		}
		// A pause (a snapshot where CRIU 4 is built, else a freeze) keeps the read-only mount.
		c.ok("sandbox", "pause", reader)
		c.ok("sandbox", "resume", reader)
		if out := c.ok("exec", reader, "--", "cat /mnt/v/new").stdout; out != "fresh\n" {
			t.Errorf("the reader after a pause sees %q", out)
		}
		r := c.run("exec", reader, "--", "sh -c 'echo no > /mnt/v/no'")
		if r.code == 0 || !strings.Contains(r.stdout+r.stderr, "Read-only file system") {
			t.Errorf("a write in the read-only mount: %s", r)
		}
		if r := c.run("sandbox", "create", "--volume", "cli-files:/mnt/v:rx"); r.code == 0 || !strings.Contains(r.stderr, "ro or rw") {
			t.Errorf("a bad mode: %s", r)
		}
		c.ok("sandbox", "kill", writer)
		c.create("--volume", "cli-files:/mnt/v")
	})
}
