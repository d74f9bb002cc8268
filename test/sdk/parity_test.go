package cove_test

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	cove "github.com/cove-dev/cove/sdk"
)

func TestBaseTemplate(t *testing.T) {
	needServer(t)
	c, _ := newClient(t, cove.Config{})
	sb := newSandbox(t, c, cove.SandboxOptions{Timeout: time.Minute})
	ctx := ctxFor(t, 2*time.Minute)
	cases := []struct {
		name, cmd, want string
	}{
		{"commands run as user, uid 1000, in /home/user", "id -u; id -un; echo $HOME; pwd", "1000\nuser\n/home/user\n/home/user\n"},
		{"user has passwordless sudo", "sudo -n true && sudo -n id -u", "0\n"},
		{"python is python3", "python -c 'import sys; print(sys.version_info[0])'", "3\n"},
		{"pip installs outside a venv (no externally-managed refusal)",
			"pip install --no-index nosuchpkg 2>&1 | grep -c 'No matching distribution'; true", "1\n"},
		{"git, curl, ps and ip are there", "for c in git curl ps ip pip python3; do command -v $c >/dev/null && echo $c; done",
			"git\ncurl\nps\nip\npip\npython3\n"},
		{"https trusts the system certificates", "test -s /etc/ssl/certs/ca-certificates.crt && echo ok", "ok\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, err := sb.Commands.Run(ctx, tc.cmd)
			if err != nil {
				t.Fatalf("%s: %v", tc.cmd, err)
			}
			if res.Stdout != tc.want {
				t.Errorf("%s: stdout %q, want %q (stderr %q)", tc.cmd, res.Stdout, tc.want, res.Stderr)
			}
		})
	}
}

// TestParity covers what the npm SDK does beyond the basics: refresh, stdin, write
// metadata, signed URLs and terminal resize.
func TestParity(t *testing.T) {
	needServer(t)
	c, _ := newClient(t, cove.Config{})
	sb := newSandbox(t, c, cove.SandboxOptions{Timeout: time.Minute})
	ctx := ctxFor(t, 2*time.Minute)

	t.Run("Refresh extends the sandbox's life but never shortens it", func(t *testing.T) {
		if err := sb.Refresh(ctx, 3*time.Minute); err != nil {
			t.Fatalf("Refresh: %v", err)
		}
		info, err := sb.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if left := time.Until(info.EndAt); left < 2*time.Minute+30*time.Second || left > 3*time.Minute+5*time.Second {
			t.Errorf("EndAt in %s after Refresh(3m), want about 3 minutes", left)
		}
		if err := sb.Refresh(ctx, 10*time.Second); err != nil {
			t.Fatalf("Refresh: %v", err)
		}
		info, err = sb.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if left := time.Until(info.EndAt); left < 2*time.Minute {
			t.Errorf("EndAt in %s after Refresh(10s), want it left at about 3 minutes", left)
		}
	})

	t.Run("SendStdin feeds a running command and CloseStdin ends its input", func(t *testing.T) {
		h, err := sb.Commands.Start(ctx, "cat; echo done", cove.Stdin())
		if err != nil {
			t.Fatal(err)
		}
		if err := sb.Commands.SendStdin(ctx, h.PID(), "one\n"); err != nil {
			t.Fatalf("SendStdin: %v", err)
		}
		if err := h.SendStdin(ctx, "two\n"); err != nil {
			t.Fatalf("handle SendStdin: %v", err)
		}
		if err := sb.Commands.CloseStdin(ctx, h.PID()); err != nil {
			t.Fatalf("CloseStdin: %v", err)
		}
		res, err := h.Wait(ctx)
		if err != nil || res.Stdout != "one\ntwo\ndone\n" {
			t.Errorf("Wait: %v, stdout %q; want one, two, done", err, res.Stdout)
		}
	})

	t.Run("a write with Metadata stores it and Stat reads it back", func(t *testing.T) {
		info, err := sb.Files.Write(ctx, "/tmp/meta.txt", []byte("x"), cove.Metadata(map[string]string{"Owner": "t-42"}))
		if err != nil {
			t.Fatal(err)
		}
		if info.Metadata["owner"] != "t-42" {
			t.Errorf("Write answered metadata %v, want owner=t-42 (keys lower-cased)", info.Metadata)
		}
		st, err := sb.Files.Stat(ctx, "/tmp/meta.txt")
		if err != nil || st.Metadata["owner"] != "t-42" {
			t.Errorf("Stat: %v, metadata %v", err, st.Metadata)
		}
	})

	t.Run("a signed upload URL and download URL work without key or headers", func(t *testing.T) {
		up, err := sb.UploadURL("/tmp/signed.txt", cove.SignatureExpiration(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(up, sb.ID) {
			t.Errorf("upload URL %s names the sandbox; a signed URL is found by its signature", up)
		}
		resp, err := http.Post(up, "application/octet-stream", strings.NewReader("signed body"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("POST upload URL: %s", resp.Status)
		}
		down, err := sb.DownloadURL("/tmp/signed.txt")
		if err != nil {
			t.Fatal(err)
		}
		resp, err = http.Get(down)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(body) != "signed body" {
			t.Errorf("GET download URL: %s %q", resp.Status, body)
		}
	})

	t.Run("a download URL signed for reading cannot write", func(t *testing.T) {
		down, err := sb.DownloadURL("/tmp/signed.txt")
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.Post(down, "application/octet-stream", strings.NewReader("nope"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode < 400 {
			t.Errorf("POST to a read URL: %s, want refused", resp.Status)
		}
	})

	t.Run("an expired URL is refused", func(t *testing.T) {
		old, err := sb.DownloadURL("/tmp/signed.txt", cove.SignatureExpiration(-time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.Get(old)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET an expired URL: %s, want 401", resp.Status)
		}
	})

	t.Run("an insecure sandbox cannot sign an expiring URL", func(t *testing.T) {
		open := newSandbox(t, c, cove.SandboxOptions{Insecure: true, Timeout: time.Minute})
		if _, err := open.DownloadURL("/etc/hostname", cove.SignatureExpiration(time.Minute)); !errors.Is(err, cove.ErrNotSecure) {
			t.Errorf("DownloadURL: %v, want ErrNotSecure", err)
		}
	})

	t.Run("a terminal takes input and a resize", func(t *testing.T) {
		var mu logBuffer
		h, err := sb.PTY.Create(ctx, cove.PTYSize{Cols: 80, Rows: 24}, cove.OnPTYData(func(b []byte) { mu.Write(b) }))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Kill(ctx) })
		if err := sb.PTY.Resize(ctx, h.PID(), cove.PTYSize{Cols: 132, Rows: 40}); err != nil {
			t.Fatalf("Resize: %v", err)
		}
		if err := sb.PTY.SendInput(ctx, h.PID(), []byte("stty size; exit\n")); err != nil {
			t.Fatalf("SendInput: %v", err)
		}
		if _, err := h.Wait(ctx); err != nil {
			t.Fatalf("Wait: %v\noutput: %q", err, mu.String())
		}
		if !strings.Contains(mu.String(), "40 132") {
			t.Errorf("terminal output %q lacks the new size 40 132", mu.String())
		}
	})
}
