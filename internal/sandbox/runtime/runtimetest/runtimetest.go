// Package runtimetest gives tests a real runc driver and a tiny busybox root filesystem, or
// skips them saying what the machine lacks.
//
// Like the runtime, it must not import template, the store or anything above them.
package runtimetest

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/internal/builder/hostpkg"
	"github.com/cove-dev/cove/internal/sandbox/runtime"
)

var (
	rootfsOnce sync.Once
	rootfsDir  string
	rootfsErr  error
)

// Cleanup removes the shared busybox rootfs; call it from TestMain after m.Run.
func Cleanup() {
	if rootfsDir != "" {
		os.RemoveAll(filepath.Dir(rootfsDir))
	}
}

// Runc returns a runc driver whose data, runc state and netns pins live in the test's temp
// dirs (sandbox cgroups go under /cove as in production), or skips the test.
func Runc(t testing.TB) *runtime.Runc {
	t.Helper()
	ctx := context.Background()
	if os.Geteuid() != 0 {
		t.Skip("runtime: needs root and runc: not running as root")
	}
	if err := ensurePackages(); err != nil {
		t.Skipf("runtime: needs root and runc: %v", err)
	}
	if err := runtime.Detect(ctx, "").Err(); err != nil {
		t.Skipf("runtime: needs root and runc: %v", err)
	}
	r, err := runtime.NewRunc(ctx, runtime.Config{
		DataDir:   t.TempDir(),
		RuncRoot:  t.TempDir(),
		NetnsDir:  t.TempDir(),
		RunscPath: RunscPath(),
		RunscRoot: runscRoot(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

var (
	pkgOnce sync.Once
	pkgErr  error
)

func ensurePackages() error {
	pkgOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		pkgErr = hostpkg.Ensure(ctx, "runc", "busybox-static")
	})
	return pkgErr
}

// BusyboxRootfs returns a root filesystem of Debian's static busybox and its applet links,
// with root and user (uid 1000) accounts, built once per test binary and shared read-only.
func BusyboxRootfs(t testing.TB) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("runtime: needs root and runc: not running as root")
	}
	rootfsOnce.Do(func() {
		if rootfsErr = ensurePackages(); rootfsErr != nil {
			return
		}
		tmp, err := os.MkdirTemp("", "cove-rootfs-")
		if err != nil {
			rootfsErr = err
			return
		}
		rootfsDir = filepath.Join(tmp, "rootfs")
		rootfsErr = makeBusyboxRootfs(rootfsDir)
	})
	if rootfsErr != nil {
		t.Skipf("runtime: needs busybox-static for the test rootfs: %v", rootfsErr)
	}
	return rootfsDir
}

func makeBusyboxRootfs(root string) error {
	for _, d := range []string{"bin", "etc", "proc", "sys", "dev", "tmp", "root", "home/user"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return err
		}
	}
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(root, "bin/busybox"), bb, 0o755); err != nil {
		return err
	}
	out, err := exec.Command("/bin/busybox", "--list").Output()
	if err != nil {
		return err
	}
	for _, applet := range strings.Fields(string(out)) {
		if applet == "busybox" {
			continue
		}
		if err := os.Symlink("busybox", filepath.Join(root, "bin", applet)); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
	}
	files := map[string]string{
		"etc/passwd": "root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/sh\n",
		"etc/group":  "root:x:0:\nuser:x:1000:\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(root, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// RuncWith is Runc with cfg's options (its directories are the test's own).
func RuncWith(t testing.TB, cfg runtime.Config) *runtime.Runc {
	t.Helper()
	Runc(t) // skips, saying why, where runc cannot run
	cfg.DataDir, cfg.RuncRoot, cfg.NetnsDir = t.TempDir(), t.TempDir(), t.TempDir()
	if cfg.RunscPath == "" {
		cfg.RunscPath = RunscPath()
	}
	if cfg.RunscRoot == "" {
		cfg.RunscRoot = runscRoot(t)
	}
	r, err := runtime.NewRunc(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// RunscPath is the repository's bin/runsc (scripts/deps.sh builds it with COVE_RUNSC=1),
// found from the test's working directory up; "" when there is none.
func RunscPath() string {
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			p := filepath.Join(dir, "bin", "runsc")
			if _, err := os.Stat(p); err != nil {
				return ""
			}
			return p
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

// Engine skips the test unless r can run sandboxes on engine, saying why.
func Engine(t testing.TB, r *runtime.Runc, engine runtime.Engine) {
	t.Helper()
	if err := r.EngineErr(engine); err != nil {
		t.Skipf("runtime engine %s unavailable here (COVE_RUNSC=1 scripts/deps.sh builds bin/runsc): %v", engine, err)
	}
}

// runscRoot is a temp dir for runsc's state. runsc pins a shared network namespace for its
// gofers there (null-netns, a bind mount that outlives every sandbox): the test's cleanup
// unmounts it before the dir goes, and fails if anything else of runsc's is left.
func runscRoot(t testing.TB) string {
	dir := t.TempDir()
	t.Cleanup(func() {
		null := filepath.Join(dir, "null-netns")
		for unix.Unmount(null, unix.MNT_DETACH) == nil {
		}
		_ = os.Remove(null)
		if left, _ := os.ReadDir(dir); len(left) > 0 {
			var names []string
			for _, e := range left {
				names = append(names, e.Name())
			}
			t.Errorf("runsc state left in %s: %s", dir, strings.Join(names, ", "))
		}
	})
	return dir
}
