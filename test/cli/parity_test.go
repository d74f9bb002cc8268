package cli

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/cove-dev/cove/internal/covetest"
)

// waitFor polls cond until it holds or a generous deadline passes.
func waitFor(t *testing.T, what string, cond func() bool, says func() string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 30 s for %s; output so far: %q", what, says())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestCLIParity(t *testing.T) {
	srv := covetest.Start(t, "")

	t.Run("exec forwards piped stdin and closes it at EOF", func(t *testing.T) {
		t.Parallel()
		c := newCLI(t, srv)
		sb := c.create()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, c.bin, "exec", sb, "--", "sh -c 'wc -l; cat >/dev/null; echo eof'")
		cmd.Env = c.env
		cmd.Stdin = strings.NewReader("one\ntwo\nthree\n")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("cove exec with piped stdin: %v; stdout %q", err, out)
		}
		if string(out) != "3\neof\n" {
			t.Errorf("stdout %q, want the 3 lines counted and then EOF", out)
		}
		cmd = exec.CommandContext(ctx, c.bin, "exec", "-n", sb, "--", "wc -c")
		cmd.Env = c.env
		cmd.Stdin = strings.NewReader("not for the sandbox")
		if out, err = cmd.Output(); err != nil || string(out) != "0\n" {
			t.Errorf("cove exec -n with piped stdin: %v, stdout %q; want 0 bytes read", err, out)
		}
	})

	t.Run("exec -it runs the command on a terminal, raw, with the local size", func(t *testing.T) {
		t.Parallel()
		c := newCLI(t, srv)
		sb := c.create()
		cmd := exec.Command(c.bin, "exec", "-it", sb, "--",
			"trap 'echo caught-int' INT; stty size; until read -r line; do :; done; echo got:$line; exit 5")
		cmd.Env = c.env
		tty, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 33, Cols: 101})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tty.Close(); _ = cmd.Process.Kill() })
		var out covetest.Buffer
		go io.Copy(&out, tty)
		waitFor(t, "the sandbox's terminal to report the local size", func() bool { return strings.Contains(out.String(), "33 101") }, out.String)
		// Raw mode: Ctrl-C is a byte for the sandbox's terminal, not a SIGINT for cove.
		if _, err := tty.Write([]byte{3}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "Ctrl-C to reach the command", func() bool { return strings.Contains(out.String(), "caught-int") }, out.String)
		if _, err := tty.Write([]byte("hello\r")); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the typed line to come back", func() bool { return strings.Contains(out.String(), "got:hello") }, out.String)
		_ = cmd.Wait()
		if code := cmd.ProcessState.ExitCode(); code != 5 {
			t.Errorf("exit code %d, want the command's 5; output %q", code, out.String())
		}
	})

	t.Run("exec -it follows a window resize", func(t *testing.T) {
		t.Parallel()
		c := newCLI(t, srv)
		sb := c.create()
		cmd := exec.Command(c.bin, "exec", "-it", sb, "--", "stty size; while read -r x; do [ \"$x\" = q ] && exit 0; stty size; done")
		cmd.Env = c.env
		tty, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 20, Cols: 70})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tty.Close(); _ = cmd.Process.Kill() })
		var out covetest.Buffer
		go io.Copy(&out, tty)
		waitFor(t, "the first size", func() bool { return strings.Contains(out.String(), "20 70") }, out.String)
		// Setsize sends cove SIGWINCH; the resize reaches the sandbox asynchronously, so
		// each poll asks the terminal its size again with an empty line.
		if err := pty.Setsize(tty, &pty.Winsize{Rows: 41, Cols: 121}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the resize to reach the sandbox", func() bool {
			if strings.Contains(out.String(), "41 121") {
				return true
			}
			tty.Write([]byte("\r"))
			return false
		}, out.String)
		tty.Write([]byte("q\r"))
		_ = cmd.Wait()
		if code := cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("exit code %d, want 0; output %q", code, out.String())
		}
	})

	t.Run("sandbox refresh extends the end and files url signs a working URL", func(t *testing.T) {
		t.Parallel()
		c := newCLI(t, srv)
		sb := strings.TrimSpace(c.ok("sandbox", "create", "--timeout", "30s").stdout)
		t.Cleanup(func() { c.run("sandbox", "kill", sb) })
		c.ok("sandbox", "refresh", sb, "4m")
		if left := time.Until(c.info(sb).EndAt); left < 3*time.Minute {
			t.Errorf("after refresh 4m the sandbox ends in %s", left)
		}
		c.ok("exec", sb, "--", "echo signed > /tmp/u.txt")
		u := strings.TrimSpace(c.ok("files", "url", sb, "/tmp/u.txt", "--expire", "1m").stdout)
		resp, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != "signed\n" {
			t.Errorf("GET %s: %s %q", u, resp.Status, body)
		}
		up := strings.TrimSpace(c.ok("files", "url", "--write", sb, "/tmp/up.txt").stdout)
		resp, err = http.Post(up, "application/octet-stream", strings.NewReader("up"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := c.ok("files", "cat", sb, "/tmp/up.txt").stdout; resp.StatusCode != 200 || got != "up" {
			t.Errorf("POST to the upload URL: %s, then the file holds %q", resp.Status, got)
		}
	})

	t.Run("files put --metadata stores it on the file", func(t *testing.T) {
		t.Parallel()
		c := newCLI(t, srv)
		sb := c.create()
		cmd := exec.Command(c.bin, "files", "put", "-m", "taskId=t-42", sb, "-", "/tmp/m.txt")
		cmd.Env = c.env
		cmd.Stdin = strings.NewReader("data")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("files put: %v\n%s", err, out)
		}
		ls := c.ok("files", "ls", sb, "/tmp", "--json").stdout
		if !strings.Contains(ls, `"taskid": "t-42"`) {
			t.Errorf("files ls --json lacks the metadata taskid=t-42 (keys lower-cased):\n%s", ls)
		}
	})

	t.Run("files watch prints a change as it happens", func(t *testing.T) {
		t.Parallel()
		c := newCLI(t, srv)
		sb := c.create()
		c.ok("exec", sb, "--", "mkdir -p /tmp/w")
		cmd := exec.Command(c.bin, "files", "watch", sb, "/tmp/w")
		cmd.Env = c.env
		var stderr covetest.Buffer
		cmd.Stderr = &stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		waitFor(t, "the watch to start", func() bool { return strings.Contains(stderr.String(), "watching") }, stderr.String)
		c.ok("exec", sb, "--", "echo x > /tmp/w/new.txt")
		lines := make(chan string, 16)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		timeout := time.After(30 * time.Second)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("watch ended without the event; stderr %s", stderr.String())
				}
				if l == "create\tnew.txt" {
					return
				}
			case <-timeout:
				t.Fatalf("no create event for new.txt in 30 s; stderr %s", stderr.String())
			}
		}
	})
}
