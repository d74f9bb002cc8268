// Package cli tests the cove CLI's client verbs (sandbox, exec, files) and the Go SDK's
// examples end to end: the built binary and `go run` against a real cove server, as a
// user would run them.
package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/covetest"
)

// cli runs the cove binary against one server, with the server's URL and key in the
// environment (COVE_API_URL, COVE_API_KEY) and no E2B_* variables to confuse it.
type cli struct {
	t   *testing.T
	bin string
	env []string
}

func newCLI(t *testing.T, srv *covetest.Server) cli {
	return cli{t: t, bin: covetest.Binary(t), env: cleanEnv("COVE_API_URL="+srv.URL, "COVE_API_KEY="+srv.Key)}
}

func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "COVE_") && !strings.HasPrefix(kv, "E2B_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

type result struct {
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
}

// run runs cove with args and returns what it printed and its exit code.
func (c cli) run(args ...string) result {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.bin, args...)
	cmd.Env = c.env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			c.t.Fatalf("cove %s: %v", strings.Join(args, " "), err)
		}
		r.code = ee.ExitCode()
	}
	return r
}

// ok runs cove and fails the test unless it exits 0.
func (c cli) ok(args ...string) result {
	c.t.Helper()
	r := c.run(args...)
	if r.code != 0 {
		c.t.Fatalf("cove %s: %s", strings.Join(args, " "), r)
	}
	return r
}

type info struct {
	SandboxID string            `json:"sandboxID"`
	State     string            `json:"state"`
	EndAt     time.Time         `json:"endAt"`
	Metadata  map[string]string `json:"metadata"`
}

func (c cli) info(id string) info {
	c.t.Helper()
	var i info
	r := c.ok("sandbox", "info", id, "--json")
	if err := json.Unmarshal([]byte(r.stdout), &i); err != nil {
		c.t.Fatalf("info --json: %v\n%s", err, r.stdout)
	}
	return i
}

func (c cli) list(args ...string) []info {
	c.t.Helper()
	var out []info
	r := c.ok(append([]string{"sandbox", "list", "--json"}, args...)...)
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		c.t.Fatalf("list --json: %v\n%s", err, r.stdout)
	}
	return out
}

// create makes a sandbox with metadata and kills it at cleanup.
func (c cli) create(args ...string) string {
	c.t.Helper()
	id := strings.TrimSpace(c.ok(append([]string{"sandbox", "create", "--timeout", "5m"}, args...)...).stdout)
	if id == "" || strings.ContainsAny(id, " \n") {
		c.t.Fatalf("sandbox create printed %q, want an id", id)
	}
	c.t.Cleanup(func() { c.run("sandbox", "kill", id) })
	return id
}

// jsonLines parses the JSON lines of s, failing on any line that is not JSON.
func jsonLines(t *testing.T, s string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.Lines(s) {
		if strings.TrimSpace(line) == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("not a JSON line: %q", line)
		}
		out = append(out, m)
	}
	return out
}

// requestID matches the request id an error names, as the SDK or envd writes it.
var requestID = regexp.MustCompile(`request[ _]id [0-9a-z]{8,}`)

func TestCLI(t *testing.T) {
	srv := covetest.Start(t, "")

	t.Run("every sandbox, exec and files verb works against the server", func(t *testing.T) {
		t.Parallel()
		c := newCLI(t, srv)
		task := fmt.Sprintf("cli-%d", time.Now().UnixNano())
		sb := c.create("--metadata", "taskId="+task, "--metadata", "suite=cli", "--env", "GREETING=hi")

		if got := c.list("--metadata", "taskId="+task); len(got) != 1 || got[0].SandboxID != sb || got[0].Metadata["suite"] != "cli" {
			t.Fatalf("list --metadata taskId=%s = %+v, want just %s", task, got, sb)
		}
		if got := c.list("--metadata", "taskId=nope-"+task); len(got) != 0 {
			t.Fatalf("list with a metadata filter nobody matches = %+v, want none", got)
		}
		if i := c.info(sb); i.SandboxID != sb || i.State != "running" || i.Metadata["taskId"] != task {
			t.Fatalf("info = %+v", i)
		}
		if r := c.ok("sandbox", "info", sb); !strings.Contains(r.stdout, "taskId="+task) {
			t.Fatalf("info's table lacks the metadata:\n%s", r.stdout)
		}

		// exec: the streams reach the right fds and the exit code is the CLI's.
		r := c.run("exec", sb, "--", "sh", "-c", "echo out; echo err >&2; exit 7")
		if r.code != 7 || r.stdout != "out\n" || r.stderr != "err\n" {
			t.Fatalf("exec sh -c 'echo out; echo err >&2; exit 7': %s", r)
		}
		if r := c.ok("exec", "--cwd", "/tmp", "--env", "X=1", sb, "--", "echo $X $GREETING $(pwd)"); r.stdout != "1 hi /tmp\n" {
			t.Fatalf("exec with --cwd and --env printed %q", r.stdout)
		}
		if r := c.ok("exec", "--user", "root", sb, "--", "id", "-un"); r.stdout != "root\n" {
			t.Fatalf("exec --user root: id -un printed %q", r.stdout)
		}
		start := time.Now()
		if r := c.run("exec", "--timeout", "1s", sb, "--", "sleep", "20"); r.code == 0 || time.Since(start) > 15*time.Second {
			t.Fatalf("exec --timeout 1s sleep 20 took %s: %s", time.Since(start), r)
		}

		// exec --background prints the pid and leaves the process running.
		r = c.ok("exec", "--background", sb, "--", "sleep", "300")
		pid, err := strconv.Atoi(strings.TrimSpace(r.stdout))
		if err != nil || pid <= 0 {
			t.Fatalf("exec --background printed %q, want a pid", r.stdout)
		}
		if r := c.run("exec", sb, "--", "cat", fmt.Sprintf("/proc/%d/cmdline", pid)); r.code != 0 || !strings.Contains(r.stdout, "sleep") {
			t.Fatalf("the background process %d is not running after the CLI left: %s", pid, r)
		}

		// files: put, ls, cat, get, rm.
		dir := t.TempDir()
		local := filepath.Join(dir, "in.txt")
		content := "hello from the CLI\nline two\n"
		if err := os.WriteFile(local, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		c.ok("files", "put", sb, local, "/tmp/cli/in.txt")
		if r := c.ok("files", "ls", sb, "/tmp/cli"); !strings.Contains(r.stdout, "/tmp/cli/in.txt") {
			t.Fatalf("files ls /tmp/cli:\n%s", r.stdout)
		}
		var entries []struct{ Name, Path string }
		if err := json.Unmarshal([]byte(c.ok("files", "ls", sb, "/tmp/cli", "--json").stdout), &entries); err != nil ||
			len(entries) != 1 || entries[0].Name != "in.txt" {
			t.Fatalf("files ls --json = %+v, %v", entries, err)
		}
		if r := c.ok("files", "cat", sb, "/tmp/cli/in.txt"); r.stdout != content {
			t.Fatalf("files cat = %q, want %q", r.stdout, content)
		}
		out := filepath.Join(dir, "out.txt")
		c.ok("files", "get", sb, "/tmp/cli/in.txt", out)
		if b, err := os.ReadFile(out); err != nil || string(b) != content {
			t.Fatalf("files get wrote %q, %v", b, err)
		}
		c.ok("files", "rm", sb, "/tmp/cli/in.txt")
		if r := c.run("files", "cat", sb, "/tmp/cli/in.txt"); r.code == 0 || !requestID.MatchString(r.stderr) {
			t.Fatalf("files cat of a removed file: %s", r)
		}

		// pause, resume, timeout.
		c.ok("sandbox", "pause", sb)
		if i := c.info(sb); i.State != "paused" {
			t.Fatalf("after pause the state is %q", i.State)
		}
		if got := c.list("--state", "paused", "--metadata", "taskId="+task); len(got) != 1 {
			t.Fatalf("list --state paused = %+v", got)
		}
		c.ok("sandbox", "resume", sb)
		if i := c.info(sb); i.State != "running" {
			t.Fatalf("after resume the state is %q", i.State)
		}
		c.ok("sandbox", "timeout", sb, "20m")
		if i := c.info(sb); time.Until(i.EndAt) < 15*time.Minute {
			t.Fatalf("after timeout 20m the sandbox ends at %s", i.EndAt)
		}

		// kill, then info says why, with the request id.
		c.ok("sandbox", "kill", sb)
		r = c.run("sandbox", "info", sb)
		if r.code == 0 || !strings.Contains(r.stderr, "was killed: request") || !requestID.MatchString(r.stderr) {
			t.Fatalf("info of a killed sandbox: %s", r)
		}
	})

	t.Run("ctrl-c ends the stream with caller_exit and exit 130, and the command runs on", func(t *testing.T) {
		t.Parallel()
		c := newCLI(t, srv)
		sb := c.create()
		for i, level := range []string{"warn", "info"} {
			// The line prints before it sleeps: output follows the start event, so once cove
			// exec prints "ready" it has the pid. (Waiting for the sleep to show in the
			// sandbox was not enough under load: the start event could still be on its way.)
			line := fmt.Sprintf("echo ready && sleep %d", 30+i)
			cmd := exec.Command(c.bin, "exec", "--log-level", level, sb, "--", line)
			cmd.Env = c.env
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cmd.Process.Kill() })
			ready := make(chan struct{})
			go func() {
				sc := bufio.NewScanner(stdout)
				for sc.Scan() {
					if sc.Text() == "ready" {
						close(ready)
						break
					}
				}
				_, _ = io.Copy(io.Discard, stdout)
			}()
			select {
			case <-ready:
			case <-time.After(20 * time.Second):
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
				t.Fatalf("cove exec never printed the command's first line; it said: %s", stderr.String())
			}
			if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()
			if code := cmd.ProcessState.ExitCode(); code != 130 {
				t.Fatalf("--log-level %s: exit code %d after SIGINT, want 130; stderr:\n%s", level, code, stderr.String())
			}
			var cli, sdk map[string]any
			for _, l := range jsonLines(t, stderr.String()) {
				if l["cancel.cause"] != "caller_exit" {
					continue
				}
				switch l["msg"] {
				case "exec interrupted":
					cli = l
				case "stream cancelled":
					sdk = l
				}
			}
			if cli == nil || cli["sandbox.id"] != sb || cli["request_id"] == "" || cli["process.pid"] == nil {
				t.Fatalf("--log-level %s: no WARN line with cancel.cause=caller_exit, the sandbox, pid and request id:\n%s", level, stderr.String())
			}
			if level == "info" && (sdk == nil || sdk["request_id"] != cli["request_id"]) {
				t.Fatalf("--log-level info: no SDK stream cancelled line with caller_exit and the same request id:\n%s", stderr.String())
			}
			pid := fmt.Sprint(cli["process.pid"])
			if r := c.run("exec", sb, "--", "kill", "-0", pid); r.code != 0 {
				t.Fatalf("the sleep (pid %s) did not outlive the stream: %s", pid, r)
			}
			c.ok("exec", sb, "--", "kill", pid)
		}
	})

	t.Run("api flags, errors with request ids, and completion", func(t *testing.T) {
		t.Parallel()
		c := newCLI(t, srv)
		flags := cli{t: t, bin: c.bin, env: cleanEnv()}
		flags.ok("sandbox", "list", "--api-url", srv.URL, "--api-key", srv.Key)
		e2b := cli{t: t, bin: c.bin, env: cleanEnv("E2B_API_URL="+srv.URL, "E2B_API_KEY="+srv.Key)}
		e2b.ok("sandbox", "list", "--json")
		if r := c.run("sandbox", "list", "--api-key", "e2b_wrong"); r.code != 1 || !requestID.MatchString(r.stderr) {
			t.Fatalf("list with a wrong key: %s", r)
		}
		if r := c.run("sandbox", "info", "nosuchsandbox"); r.code != 1 || !requestID.MatchString(r.stderr) {
			t.Fatalf("info of an unknown sandbox: %s", r)
		}
		if r := c.run("sandbox", "list", "--log-level", "loud"); r.code != 1 || !strings.Contains(r.stderr, "--log-level") {
			t.Fatalf("list --log-level loud: %s", r)
		}
		if r := c.ok("completion", "bash"); !strings.Contains(r.stdout, "__start_cove") {
			t.Fatalf("completion bash printed no completion script:\n%.500s", r.stdout)
		}
		sb := c.create()
		if r := c.ok("__complete", "exec", ""); !strings.Contains(r.stdout, sb) {
			t.Fatalf("exec's sandbox completion lacks %s:\n%s", sb, r.stdout)
		}
	})

	t.Run("examples run against the server", func(t *testing.T) {
		t.Parallel()
		runExample := func(t *testing.T, name string, args ...string) (string, string) {
			root := strings.TrimSpace(string(must(exec.Command("go", "env", "GOMOD").Output())))
			cmd := exec.Command("go", append([]string{"run", "./examples/" + name}, args...)...)
			cmd.Dir = filepath.Dir(root)
			cmd.Env = cleanEnv("COVE_API_URL="+srv.URL, "COVE_API_KEY="+srv.Key)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("go run ./examples/%s: %v\nstdout: %s\nstderr: %s", name, err, stdout.String(), stderr.String())
			}
			return stdout.String(), stderr.String()
		}
		t.Run("taskid logs the task and the sandbox on every line", func(t *testing.T) {
			t.Parallel()
			out, _ := runExample(t, "taskid", "t-example")
			lines := jsonLines(t, out)
			if len(lines) < 3 {
				t.Fatalf("taskid printed %d lines:\n%s", len(lines), out)
			}
			done := false
			for _, l := range lines {
				if l["taskId"] != "t-example" || l["sandbox.id"] == nil || l["sandbox.id"] == "" {
					t.Fatalf("a line without taskId or sandbox.id: %v", l)
				}
				done = done || (l["msg"] == "command done" && l["exit_code"] == float64(0))
			}
			if !done {
				t.Fatalf("no command done line:\n%s", out)
			}
		})
		t.Run("background reconnects by pid and reads the exit code", func(t *testing.T) {
			t.Parallel()
			out, _ := runExample(t, "background")
			for _, want := range []string{"first line: 1", "disconnected", "after reconnect: 5", "exit code 0"} {
				if !strings.Contains(out, want) {
					t.Fatalf("background's output lacks %q:\n%s", want, out)
				}
			}
		})
		t.Run("errgroup cancels the siblings with sibling_cancel", func(t *testing.T) {
			t.Parallel()
			out, errOut := runExample(t, "errgroup")
			if !strings.Contains(out, "first error:") || !strings.Contains(out, "code 3") {
				t.Fatalf("errgroup's output:\n%s", out)
			}
			n := 0
			for line := range strings.Lines(errOut) {
				var l map[string]any
				if json.Unmarshal([]byte(line), &l) == nil && l["msg"] == "stream cancelled" && l["cancel.cause"] == "sibling_cancel" &&
					strings.Contains(fmt.Sprint(l["cancel.detail"]), "exit 3") {
					n++
				}
			}
			if n != 2 {
				t.Fatalf("%d sibling_cancel lines, want 2:\n%s", n, errOut)
			}
		})
	})
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
