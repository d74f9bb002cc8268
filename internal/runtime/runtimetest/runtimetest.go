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

	"github.com/cove-dev/cove/internal/hostpkg"
	"github.com/cove-dev/cove/internal/runtime"
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
		DataDir:  t.TempDir(),
		RuncRoot: t.TempDir(),
		NetnsDir: t.TempDir(),
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
	r, err := runtime.NewRunc(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
