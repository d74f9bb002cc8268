package filesystem_test

import (
	"context"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	rpc "github.com/cove-dev/cove/sdk/gen/filesystem"
)

// openDir returns a new directory with mode perm that other users can reach: t.TempDir's
// parent is root's alone (0700).
func openDir(t *testing.T, perm os.FileMode) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, perm); err != nil {
		t.Fatal(err)
	}
	return dir
}

// needNobody returns the nobody account, skipping the test when it cannot act as it.
func needNobody(t *testing.T) *user.User {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("acting as another user needs root")
	}
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Skip("no nobody account on this machine")
	}
	return nobody
}

// TestCallsActAsTheUserTheyName makes the same calls as root and as nobody on files only root
// may touch: root's succeed, nobody's are permission_denied and change nothing, and what
// nobody makes where it may is nobody's.
func TestCallsActAsTheUserTheyName(t *testing.T) {
	t.Parallel()
	nobody := needNobody(t)
	_, clients := serve(t)
	client := clients["binary"]
	ctx := context.Background()

	// root/        0755 root
	//   private/   0700 root, with secret.txt
	//   locked/    0755 root, with file.txt 0644
	//   public/    0777
	root := openDir(t, 0o755)
	private := filepath.Join(root, "private")
	locked := filepath.Join(root, "locked")
	public := filepath.Join(root, "public")
	for dir, perm := range map[string]os.FileMode{private: 0o700, locked: 0o755, public: 0o777} {
		if err := os.Mkdir(dir, perm); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, perm); err != nil { // past the umask
			t.Fatal(err)
		}
	}
	write(t, filepath.Join(private, "secret.txt"), "secret")
	write(t, filepath.Join(locked, "file.txt"), "kept")

	type call struct {
		name string
		do   func(as string) error
		// undo puts back what root's call changed, so that nobody's call meets the same tree.
		undo func(t *testing.T)
	}
	calls := []call{
		{"stat of a file in a directory only root may enter", func(as string) error {
			_, err := client.Stat(ctx, asUser(&rpc.StatRequest{Path: filepath.Join(private, "secret.txt")}, as))
			return err
		}, nil},
		{"list of a directory only root may read", func(as string) error {
			_, err := client.ListDir(ctx, asUser(&rpc.ListDirRequest{Path: private}, as))
			return err
		}, nil},
		{"make dir in root's directory", func(as string) error {
			_, err := client.MakeDir(ctx, asUser(&rpc.MakeDirRequest{Path: filepath.Join(locked, "sub")}, as))
			return err
		}, func(t *testing.T) { mustRemove(t, filepath.Join(locked, "sub")) }},
		{"move out of root's directory", func(as string) error {
			_, err := client.Move(ctx, asUser(&rpc.MoveRequest{Source: filepath.Join(locked, "file.txt"), Destination: filepath.Join(public, "moved.txt")}, as))
			return err
		}, func(t *testing.T) {
			if err := os.Rename(filepath.Join(public, "moved.txt"), filepath.Join(locked, "file.txt")); err != nil {
				t.Fatal(err)
			}
		}},
		{"remove of a file in root's directory", func(as string) error {
			_, err := client.Remove(ctx, asUser(&rpc.RemoveRequest{Path: filepath.Join(locked, "file.txt")}, as))
			return err
		}, func(t *testing.T) { write(t, filepath.Join(locked, "file.txt"), "kept") }},
		{"watch of a directory only root may read", func(as string) error {
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			stream, err := client.WatchDir(wctx, asUser(&rpc.WatchDirRequest{Path: private}, as))
			if err != nil {
				return err
			}
			defer stream.Close()
			if !stream.Receive() {
				return stream.Err()
			}
			return nil
		}, nil},
		{"watcher of a directory only root may read", func(as string) error {
			_, err := client.CreateWatcher(ctx, asUser(&rpc.CreateWatcherRequest{Path: private}, as))
			return err
		}, nil},
	}
	for _, c := range calls {
		t.Run("as root: "+c.name+" succeeds", func(t *testing.T) {
			if err := c.do("root"); err != nil {
				t.Fatal(err)
			}
			if c.undo != nil {
				c.undo(t)
			}
		})
		t.Run("as nobody: "+c.name+" is permission_denied", func(t *testing.T) {
			if err := c.do("nobody"); code(err) != connect.CodePermissionDenied {
				t.Fatalf("code = %v (%v), want permission_denied", code(err), err)
			}
		})
	}
	t.Run("nobody's refused calls changed nothing", func(t *testing.T) {
		if b, err := os.ReadFile(filepath.Join(locked, "file.txt")); err != nil || string(b) != "kept" {
			t.Errorf("locked/file.txt = %q (%v)", b, err)
		}
		if _, err := os.Stat(filepath.Join(locked, "sub")); !os.IsNotExist(err) {
			t.Errorf("locked/sub exists: %v", err)
		}
	})
	t.Run("as nobody: what it makes where it may is nobody's", func(t *testing.T) {
		p := filepath.Join(public, "a", "b")
		if _, err := client.MakeDir(ctx, asUser(&rpc.MakeDirRequest{Path: p}, "nobody")); err != nil {
			t.Fatal(err)
		}
		for _, d := range []string{filepath.Join(public, "a"), p} {
			fi, err := os.Stat(d)
			if err != nil {
				t.Fatal(err)
			}
			if uid := strconv.Itoa(int(fi.Sys().(*syscall.Stat_t).Uid)); uid != nobody.Uid {
				t.Errorf("%s uid = %s, want %s", d, uid, nobody.Uid)
			}
		}
		if _, err := client.Remove(ctx, asUser(&rpc.RemoveRequest{Path: filepath.Join(public, "a")}, "nobody")); err != nil {
			t.Errorf("nobody removing its own directory: %v", err)
		}
	})
}

func mustRemove(t *testing.T, p string) {
	t.Helper()
	if err := os.RemoveAll(p); err != nil {
		t.Fatal(err)
	}
}
