package cove_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	cove "github.com/cove-dev/cove/sdk"
	"github.com/cove-dev/cove/sdk/reason"
)

func TestRun(t *testing.T) {
	needServer(t)
	c, _ := newClient(t, cove.Config{})
	sb := newSandbox(t, c, cove.SandboxOptions{EnvVars: map[string]string{"GREETING": "hello"}})
	ctx := ctxFor(t, time.Minute)

	t.Run("a command that exits 0 returns its output and the request id envd logged", func(t *testing.T) {
		var mu sync.Mutex
		var chunks []string
		res, err := sb.Commands.Run(ctx, `echo "$GREETING $WHO"; echo oops >&2`,
			cove.Envs(map[string]string{"WHO": "world"}),
			cove.OnStdout(func(s string) { mu.Lock(); chunks = append(chunks, s); mu.Unlock() }))
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		if res.ExitCode != 0 || res.Stdout != "hello world\n" || res.Stderr != "oops\n" {
			t.Errorf("result %+v, want exit 0, stdout \"hello world\\n\", stderr \"oops\\n\"", res)
		}
		mu.Lock()
		if strings.Join(chunks, "") != res.Stdout {
			t.Errorf("OnStdout saw %q, want %q", chunks, res.Stdout)
		}
		mu.Unlock()
		id := res.RequestID()
		if len(id) != 20 {
			t.Errorf("RequestID() = %q, want a 20-character id", id)
		}
		if lines := envdLines(t, sb.ID, "stream end", id, 1); len(lines) != 1 || lines[0]["stream.end"] != "completed" {
			t.Errorf("envd's stream end lines for %s: %v, want one completed", id, lines)
		}
	})

	t.Run("a command that exits 3 is a CommandExitError with its output", func(t *testing.T) {
		res, err := sb.Commands.Run(ctx, `echo out; echo bad >&2; exit 3`)
		var exit *cove.CommandExitError
		if !errors.As(err, &exit) {
			t.Fatalf("Run: %v, want a *CommandExitError", err)
		}
		if exit.ExitCode != 3 || exit.Stdout != "out\n" || exit.Stderr != "bad\n" {
			t.Errorf("error %+v, want exit 3 with its output", exit)
		}
		if exit.RequestID == "" || res == nil || exit.RequestID != res.RequestID() || cove.RequestIDOf(err) != exit.RequestID {
			t.Errorf("request ids: error %q, result %v, RequestIDOf %q", exit.RequestID, res, cove.RequestIDOf(err))
		}
		if !strings.Contains(err.Error(), exit.RequestID) {
			t.Errorf("error text %q does not name the request id", err)
		}
	})

	t.Run("WithRequestID makes the call use the caller's id", func(t *testing.T) {
		res, err := sb.Commands.Run(cove.WithRequestID(ctx, "my-own-id-123"), "true")
		if err != nil {
			t.Fatal(err)
		}
		if res.RequestID() != "my-own-id-123" {
			t.Errorf("RequestID() = %q", res.RequestID())
		}
		if lines := envdLines(t, sb.ID, "stream end", "my-own-id-123", 1); len(lines) != 1 {
			t.Errorf("envd has %d stream end lines for my-own-id-123, want 1", len(lines))
		}
	})

	t.Run("stdin reaches a command started with Stdin", func(t *testing.T) {
		h, err := sb.Commands.Start(ctx, "cat", cove.Stdin())
		if err != nil {
			t.Fatal(err)
		}
		if err := sb.Commands.SendStdin(ctx, h.PID(), "piped\n"); err != nil {
			t.Fatalf("SendStdin: %v", err)
		}
		if err := h.CloseStdin(ctx); err != nil {
			t.Fatalf("CloseStdin: %v", err)
		}
		res, err := h.Wait(ctx)
		if err != nil || res.Stdout != "piped\n" {
			t.Errorf("Wait: %v, %+v; want stdout \"piped\\n\"", err, res)
		}
	})
}

func TestBackgroundDisconnectConnect(t *testing.T) {
	needServer(t)
	c, _ := newClient(t, cove.Config{})
	sb := newSandbox(t, c, cove.SandboxOptions{})
	ctx := ctxFor(t, time.Minute)

	h, err := sb.Commands.Start(ctx, `for i in $(seq 1 20); do echo line $i; sleep 0.1; done`, cove.Tag("counter"))
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	for !strings.Contains(h.Stdout(), "line 2\n") {
		select {
		case <-h.Done():
			t.Fatalf("stream ended early: %v", h.Stdout())
		case <-time.After(20 * time.Millisecond):
		}
	}
	h.Disconnect()
	before := h.Stdout()

	procs, err := sb.Commands.List(ctx)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if !slices.ContainsFunc(procs, func(p cove.ProcessInfo) bool { return p.PID == h.PID() && p.Tag == "counter" }) {
		t.Errorf("List after Disconnect: %+v, want pid %d tagged counter still running", procs, h.PID())
	}

	h2, err := sb.Commands.Connect(ctx, h.PID())
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	if h2.RequestID() == h.RequestID() {
		t.Error("Connect reused the Start stream's request id")
	}
	res, err := h2.Wait(ctx)
	if err != nil {
		t.Fatalf("Wait after Connect: %v", err)
	}
	if !strings.Contains(res.Stdout, "line 20\n") || strings.Contains(res.Stdout, "line 1\n") {
		t.Errorf("Connect's output %q, want the later lines only (before Disconnect: %q)", res.Stdout, before)
	}
}

func TestKill(t *testing.T) {
	needServer(t)
	c, _ := newClient(t, cove.Config{})
	sb := newSandbox(t, c, cove.SandboxOptions{})
	ctx := ctxFor(t, time.Minute)

	h, err := sb.Commands.Start(ctx, "sleep 60")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Kill(ctx); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	_, err = h.Wait(ctx)
	var exit *cove.CommandExitError
	if !errors.As(err, &exit) || !strings.Contains(exit.Status, "killed") {
		t.Fatalf("Wait after Kill: %v, want a CommandExitError with status signal: killed", err)
	}
	err = sb.Commands.Kill(ctx, h.PID())
	if !errors.Is(err, cove.ErrNotFound) || cove.RequestIDOf(err) == "" {
		t.Errorf("Kill of a gone process: %v, want ErrNotFound with a request id", err)
	}
}

func TestFiles(t *testing.T) {
	needServer(t)
	c, _ := newClient(t, cove.Config{})
	sb := newSandbox(t, c, cove.SandboxOptions{})
	ctx := ctxFor(t, time.Minute)
	f := sb.Files

	t.Run("bytes written are read back", func(t *testing.T) {
		info, err := f.Write(ctx, "/tmp/dir/a.txt", []byte("alpha"))
		if err != nil {
			t.Fatalf("Write: %v", err)
		}
		if info.Path != "/tmp/dir/a.txt" || info.RequestID() == "" {
			t.Errorf("Write's entry %+v", info)
		}
		got, err := f.Read(ctx, "/tmp/dir/a.txt")
		if err != nil || string(got) != "alpha" {
			t.Errorf("Read: %q, %v", got, err)
		}
	})
	t.Run("a reader is streamed into a file", func(t *testing.T) {
		big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
		if _, err := f.WriteFrom(ctx, "big.bin", bytes.NewReader(big)); err != nil {
			t.Fatalf("WriteFrom: %v", err)
		}
		got, err := f.Read(ctx, "big.bin")
		if err != nil || !bytes.Equal(got, big) {
			t.Errorf("Read: %d bytes, %v; want %d", len(got), err, len(big))
		}
		st, err := f.Stat(ctx, "big.bin")
		if err != nil || st.Size != int64(len(big)) || st.Type != cove.TypeFile {
			t.Errorf("Stat: %+v, %v", st, err)
		}
	})
	t.Run("directories are made, listed, renamed and removed", func(t *testing.T) {
		made, err := f.MakeDir(ctx, "/tmp/tree/sub")
		if err != nil || !made {
			t.Fatalf("MakeDir: %v, %v", made, err)
		}
		if made, err := f.MakeDir(ctx, "/tmp/tree/sub"); err != nil || made {
			t.Errorf("MakeDir again: %v, %v; want false, nil", made, err)
		}
		if _, err := f.Write(ctx, "/tmp/tree/x", []byte("x")); err != nil {
			t.Fatal(err)
		}
		entries, err := f.List(ctx, "/tmp/tree")
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range entries {
			names = append(names, e.Name)
		}
		slices.Sort(names)
		if !slices.Equal(names, []string{"sub", "x"}) {
			t.Errorf("List: %v, want [sub x]", names)
		}
		if _, err := f.Rename(ctx, "/tmp/tree/x", "/tmp/tree/y"); err != nil {
			t.Fatalf("Rename: %v", err)
		}
		if ok, err := f.Exists(ctx, "/tmp/tree/x"); err != nil || ok {
			t.Errorf("Exists(x) after rename: %v, %v", ok, err)
		}
		if ok, err := f.Exists(ctx, "/tmp/tree/y"); err != nil || !ok {
			t.Errorf("Exists(y) after rename: %v, %v", ok, err)
		}
		if err := f.Remove(ctx, "/tmp/tree"); err != nil {
			t.Fatalf("Remove: %v", err)
		}
		if ok, _ := f.Exists(ctx, "/tmp/tree"); ok {
			t.Error("the tree is still there after Remove")
		}
	})
	t.Run("reading a missing file is ErrNotFound with a request id", func(t *testing.T) {
		_, err := f.Read(ctx, "/tmp/nope")
		if !errors.Is(err, cove.ErrNotFound) || cove.RequestIDOf(err) == "" {
			t.Errorf("Read: %v, want ErrNotFound with a request id", err)
		}
	})
	t.Run("a watch sees a file written", func(t *testing.T) {
		if _, err := f.MakeDir(ctx, "/tmp/watched"); err != nil {
			t.Fatal(err)
		}
		w, err := f.Watch(ctx, "/tmp/watched")
		if err != nil {
			t.Fatalf("Watch: %v", err)
		}
		defer w.Stop()
		if _, err := f.Write(ctx, "/tmp/watched/new.txt", []byte("n")); err != nil {
			t.Fatal(err)
		}
		timeout := time.After(10 * time.Second)
		for {
			select {
			case ev := <-w.Events():
				if ev.Name == "new.txt" {
					return
				}
			case <-timeout:
				t.Fatalf("no event for new.txt within 10 s (watch error %v)", w.Err())
			}
		}
	})
}

func TestPTY(t *testing.T) {
	needServer(t)
	c, _ := newClient(t, cove.Config{})
	sb := newSandbox(t, c, cove.SandboxOptions{})
	ctx := ctxFor(t, time.Minute)
	var mu sync.Mutex
	var out bytes.Buffer
	h, err := sb.PTY.Create(ctx, cove.PTYSize{Cols: 80, Rows: 24}, cove.OnPTYData(func(b []byte) { mu.Lock(); out.Write(b); mu.Unlock() }))
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if err := sb.PTY.Resize(ctx, h.PID(), cove.PTYSize{Cols: 100, Rows: 40}); err != nil {
		t.Errorf("Resize: %v", err)
	}
	if err := sb.PTY.SendInput(ctx, h.PID(), []byte("stty size; echo mark-$((20+22))\n")); err != nil {
		t.Fatalf("SendInput: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		s := out.String()
		mu.Unlock()
		if strings.Contains(s, "mark-42") && strings.Contains(s, "40 100") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("terminal output %q lacks mark-42 and the new size 40 100", s)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := sb.PTY.Kill(ctx, h.PID()); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if _, err := h.Wait(ctx); err == nil {
		t.Error("Wait after Kill: no error, want the kill")
	}
}

func TestSandboxKilledError(t *testing.T) {
	needServer(t)
	c, _ := newClient(t, cove.Config{})
	sb := newSandbox(t, c, cove.SandboxOptions{})
	ctx := ctxFor(t, time.Minute)
	if err := sb.Kill(ctx); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	check := func(t *testing.T, what string, err error) {
		t.Helper()
		var killed *cove.SandboxKilledError
		if !errors.As(err, &killed) {
			t.Fatalf("%s: %v, want a *SandboxKilledError", what, err)
		}
		if killed.SandboxID != sb.ID || killed.Reason != reason.KillRequest || killed.RequestID == "" {
			t.Errorf("%s: %+v, want sandbox %s, reason request, a request id", what, killed, sb.ID)
		}
		if !errors.Is(err, cove.ErrNotFound) {
			t.Errorf("%s: %v does not match ErrNotFound", what, err)
		}
	}
	t.Run("the REST API's 404 says it was killed by request", func(t *testing.T) {
		_, err := sb.Info(ctx)
		check(t, "Info", err)
	})
	t.Run("the proxy's 502 says it was killed by request", func(t *testing.T) {
		_, err := sb.Commands.Run(ctx, "true")
		check(t, "Run", err)
		_, err = sb.Files.Read(ctx, "/etc/hostname")
		check(t, "Read", err)
	})
	t.Run("killing it again is a SandboxKilledError", func(t *testing.T) {
		check(t, "Kill", sb.Kill(ctx))
	})
}

func TestSandboxLifecycle(t *testing.T) {
	needServer(t)
	c, _ := newClient(t, cove.Config{})
	mark := fmt.Sprintf("sdk-%d", time.Now().UnixNano())
	sb := newSandbox(t, c, cove.SandboxOptions{Metadata: map[string]string{"suite": mark}})
	sb2 := newSandbox(t, c, cove.SandboxOptions{Metadata: map[string]string{"suite": mark}, Insecure: true})
	ctx := ctxFor(t, 2*time.Minute)

	t.Run("a sandbox is secure by default and its commands carry its access token", func(t *testing.T) {
		if !sb.Secure || sb2.Secure {
			t.Fatalf("Secure: default %v, Insecure %v; want true, false", sb.Secure, sb2.Secure)
		}
		res, err := sb.Commands.Run(ctx, "echo secure")
		if err != nil || res.Stdout != "secure\n" {
			t.Errorf("Run: %v, %+v", err, res)
		}
	})
	t.Run("Info describes it with the request id", func(t *testing.T) {
		info, err := sb.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.SandboxID != sb.ID || info.State != cove.StateRunning || info.Metadata["suite"] != mark || info.RequestID() == "" {
			t.Errorf("Info: %+v", info)
		}
		if time.Until(info.EndAt) < time.Minute {
			t.Errorf("EndAt %v, want about 5 minutes away", info.EndAt)
		}
	})
	t.Run("List pages through the metadata filter", func(t *testing.T) {
		var ids []string
		for info, err := range c.List(ctx, cove.ListOptions{Metadata: map[string]string{"suite": mark}, PageSize: 1}) {
			if err != nil {
				t.Fatalf("List: %v", err)
			}
			ids = append(ids, info.SandboxID)
		}
		slices.Sort(ids)
		want := []string{sb.ID, sb2.ID}
		slices.Sort(want)
		if !slices.Equal(ids, want) {
			t.Errorf("List: %v, want %v", ids, want)
		}
	})
	t.Run("SetTimeout moves the end", func(t *testing.T) {
		if err := sb.SetTimeout(ctx, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		info, err := sb.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if left := time.Until(info.EndAt); left > 31*time.Second || left < 20*time.Second {
			t.Errorf("EndAt in %s, want about 30 s", left)
		}
		if err := sb.SetTimeout(ctx, 5*time.Minute); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("Pause, then Connect resumes it with its files", func(t *testing.T) {
		if _, err := sb2.Files.Write(ctx, "/tmp/kept", []byte("kept")); err != nil {
			t.Fatal(err)
		}
		if err := sb2.Pause(ctx); err != nil {
			t.Fatalf("Pause: %v", err)
		}
		if err := sb2.Pause(ctx); !errors.Is(err, cove.ErrConflict) {
			t.Errorf("Pause again: %v, want ErrConflict", err)
		}
		if running, err := sb2.IsRunning(ctx); err != nil || running {
			t.Errorf("IsRunning while paused: %v, %v", running, err)
		}
		again, err := c.Connect(ctx, sb2.ID, time.Minute)
		if err != nil {
			t.Fatalf("Connect: %v", err)
		}
		got, err := again.Files.Read(ctx, "/tmp/kept")
		if err != nil || string(got) != "kept" {
			t.Errorf("Read after resume: %q, %v", got, err)
		}
	})
	t.Run("Metrics answers or says not found, with a request id", func(t *testing.T) {
		_, err := sb.Metrics(ctx, time.Time{}, time.Time{})
		if err != nil && (!errors.Is(err, cove.ErrNotFound) || cove.RequestIDOf(err) == "") {
			t.Errorf("Metrics: %v, want success or ErrNotFound with a request id", err)
		}
	})
}

func TestErrors(t *testing.T) {
	needServer(t)
	c, _ := newClient(t, cove.Config{})
	ctx := ctxFor(t, time.Minute)

	t.Run("an unknown sandbox is ErrNotFound naming the request id", func(t *testing.T) {
		_, err := c.Info(ctx, "inosuchsandbox0000000")
		var e *cove.Error
		if !errors.Is(err, cove.ErrNotFound) || !errors.As(err, &e) || e.StatusCode != 404 || e.RequestID == "" {
			t.Fatalf("Info: %v, want a 404 *cove.Error matching ErrNotFound", err)
		}
		if !strings.Contains(err.Error(), e.RequestID) {
			t.Errorf("error text %q lacks the request id", err)
		}
	})
	t.Run("a wrong API key is ErrAuth", func(t *testing.T) {
		bad, _ := newClient(t, cove.Config{APIKey: "e2b_00000000000000000000"})
		_, err := bad.Create(ctx, cove.SandboxOptions{})
		if !errors.Is(err, cove.ErrAuth) || cove.RequestIDOf(err) == "" {
			t.Errorf("Create: %v, want ErrAuth with a request id", err)
		}
	})
	t.Run("an unknown template is ErrNotFound", func(t *testing.T) {
		_, err := c.Create(ctx, cove.SandboxOptions{Template: "no-such-template"})
		if !errors.Is(err, cove.ErrNotFound) {
			t.Errorf("Create: %v, want ErrNotFound", err)
		}
	})
	t.Run("the request timeout is ErrTimeout", func(t *testing.T) {
		quick, _ := newClient(t, cove.Config{RequestTimeout: time.Nanosecond})
		_, err := quick.Info(ctx, "inosuchsandbox0000000")
		if !errors.Is(err, cove.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) || cove.RequestIDOf(err) == "" {
			t.Errorf("Info: %v, want ErrTimeout with a request id", err)
		}
	})
}
