package identity

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
)

// nobody returns the unprivileged account the credential tests act as, skipping when envd's
// tests do not run as root or the machine has no such account.
func nobody(t *testing.T) *User {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("switching credentials needs root")
	}
	u, err := Lookup("nobody")
	if err != nil {
		t.Skip("no nobody account on this machine")
	}
	return u
}

func TestActChecksAndCreatesAsTheUser(t *testing.T) {
	t.Run("with setfsuid and setfsgid", testActChecksAndCreatesAsTheUser)
	t.Run("with the thread's effective ids, where the kernel lacks setfsuid (gVisor)", func(t *testing.T) {
		orig := haveFSIDs
		haveFSIDs = func() bool { return false }
		t.Cleanup(func() { haveFSIDs = orig })
		testActChecksAndCreatesAsTheUser(t)
	})
}

func testActChecksAndCreatesAsTheUser(t *testing.T) {
	u := nobody(t)
	dir := t.TempDir()
	// t.TempDir's parent is root's alone (0700): let others through to dir, and write in it.
	if err := os.Chmod(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte("root only"), 0o600); err != nil {
		t.Fatal(err)
	}

	t.Run("a file only root may read is refused", func(t *testing.T) {
		err := u.Act(func() error { _, err := os.ReadFile(secret); return err })
		if !errors.Is(err, fs.ErrPermission) {
			t.Errorf("read as %s: %v, want permission denied", u.Name, err)
		}
	})
	t.Run("a file made is the user's", func(t *testing.T) {
		p := filepath.Join(dir, "made")
		if err := u.Act(func() error { return os.WriteFile(p, nil, 0o644) }); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != u.UID || int(st.Gid) != u.GID {
			t.Errorf("owner %d:%d, want %d:%d", st.Uid, st.Gid, u.UID, u.GID)
		}
	})
	t.Run("root is root again after, on every thread", func(t *testing.T) {
		var wg sync.WaitGroup
		errs := make(chan error, 400)
		for range 200 {
			wg.Add(2)
			go func() {
				defer wg.Done()
				errs <- u.Act(func() error { return nil })
			}()
			go func() {
				defer wg.Done()
				_, err := os.ReadFile(secret)
				errs <- err
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		if _, err := os.ReadFile(secret); err != nil {
			t.Errorf("root read after acting as %s: %v", u.Name, err)
		}
	})
	t.Run("root acts as itself", func(t *testing.T) {
		root, err := Lookup("root")
		if err != nil {
			t.Fatal(err)
		}
		if err := root.Act(func() error { _, err := os.ReadFile(secret); return err }); err != nil {
			t.Errorf("read as root: %v", err)
		}
	})
}

// BenchmarkAct is the cost Act adds to a file system call made as another user.
func BenchmarkAct(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("switching credentials needs root")
	}
	u, err := Lookup("nobody")
	if err != nil {
		b.Skip("no nobody account on this machine")
	}
	for b.Loop() {
		if err := u.Act(func() error { return nil }); err != nil {
			b.Fatal(err)
		}
	}
}
