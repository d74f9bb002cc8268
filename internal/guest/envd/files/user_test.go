package files_test

import (
	"net/http"
	"net/url"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestFilesActAsTheUserTheyName uploads and downloads as root and as nobody: nobody may not
// read a file only root may, nor write over root's file, and what it uploads is its own.
func TestFilesActAsTheUserTheyName(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("acting as another user needs root")
	}
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Skip("no nobody account on this machine")
	}
	srv := serve(t, "")
	dir := t.TempDir()
	// t.TempDir's parent is root's alone: let nobody through, and write in dir.
	for d, perm := range map[string]os.FileMode{filepath.Dir(dir): 0o755, dir: 0o777} {
		if err := os.Chmod(d, perm); err != nil {
			t.Fatal(err)
		}
	}
	secret := filepath.Join(dir, "secret.txt")
	if err := os.WriteFile(secret, []byte("root only"), 0o600); err != nil {
		t.Fatal(err)
	}
	shared := filepath.Join(dir, "roots.txt")
	if err := os.WriteFile(shared, []byte("root's"), 0o644); err != nil {
		t.Fatal(err)
	}

	get := func(path, as string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, fileURL(srv, url.Values{"path": {path}, "username": {as}}), nil)
		res, body := do(t, req)
		return res.StatusCode, string(body)
	}
	post := func(path, as, data string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, fileURL(srv, url.Values{"path": {path}, "username": {as}}), strings.NewReader(data))
		req.Header.Set("Content-Type", "application/octet-stream")
		res, body := do(t, req)
		return res.StatusCode, string(body)
	}
	owner := func(path string) string {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return strconv.Itoa(int(fi.Sys().(*syscall.Stat_t).Uid))
	}

	t.Run("root reads a file only root may read", func(t *testing.T) {
		if status, body := get(secret, "root"); status != http.StatusOK || body != "root only" {
			t.Errorf("status %d body %q", status, body)
		}
	})
	t.Run("nobody reading a file only root may read is 403", func(t *testing.T) {
		status, body := get(secret, "nobody")
		if status != http.StatusForbidden {
			t.Fatalf("status %d (%s), want 403", status, body)
		}
		errorBody(t, status, []byte(body))
	})
	t.Run("nobody writing over root's file is 403 and the file is unchanged", func(t *testing.T) {
		status, body := post(shared, "nobody", "nobody's")
		if status != http.StatusForbidden {
			t.Fatalf("status %d (%s), want 403", status, body)
		}
		if b, _ := os.ReadFile(shared); string(b) != "root's" {
			t.Errorf("content %q", b)
		}
	})
	t.Run("nobody's upload, with the parents it makes, is nobody's", func(t *testing.T) {
		p := filepath.Join(dir, "made", "by", "nobody.txt")
		if status, body := post(p, "nobody", "mine"); status != http.StatusOK {
			t.Fatalf("status %d (%s)", status, body)
		}
		for _, q := range []string{filepath.Join(dir, "made"), filepath.Join(dir, "made", "by"), p} {
			if got := owner(q); got != nobody.Uid {
				t.Errorf("%s owner uid %s, want %s", q, got, nobody.Uid)
			}
		}
		if status, body := get(p, "nobody"); status != http.StatusOK || body != "mine" {
			t.Errorf("reading it back: status %d body %q", status, body)
		}
	})
	t.Run("root writes over root's file", func(t *testing.T) {
		if status, body := post(shared, "root", "new"); status != http.StatusOK {
			t.Fatalf("status %d (%s)", status, body)
		}
		if b, _ := os.ReadFile(shared); string(b) != "new" || owner(shared) != "0" {
			t.Errorf("content %q owner %s", b, owner(shared))
		}
	})
}
