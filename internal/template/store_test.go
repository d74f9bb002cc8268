package template_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/runtime"
	"github.com/cove-dev/cove/internal/runtime/runtimetest"
	"github.com/cove-dev/cove/internal/template"
)

func TestMain(m *testing.M) {
	code := m.Run()
	runtimetest.Cleanup()
	os.Exit(code)
}

func newID(prefix string) string {
	b := make([]byte, 4)
	rand.Read(b)
	return prefix + "-" + hex.EncodeToString(b)
}

// runOn runs spec (its ID set here) in a sandbox on rootfs and returns its stdout.
func runOn(t *testing.T, rt runtime.Runtime, prefix string, spec runtime.Spec) string {
	t.Helper()
	ctx := context.Background()
	spec.ID = newID(prefix)
	sb, err := rt.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Destroy(ctx, spec.ID) })
	if err := rt.Start(ctx, spec.ID); err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, sb.Stderr)
	var out bytes.Buffer
	out.ReadFrom(sb.Stdout)
	return out.String()
}

func TestDerivedTemplates(t *testing.T) {
	rt := runtimetest.Runc(t)
	bb := runtimetest.BusyboxRootfs(t)
	ctx := context.Background()
	store, err := template.Open(t.TempDir(), rt)
	if err != nil {
		t.Fatal(err)
	}
	base, err := store.Import(ctx, "busybox", bb, nil)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("run steps make layers on the parent, with their output in the log", func(t *testing.T) {
		var progress bytes.Buffer
		tpl, err := store.Build(ctx, template.Spec{
			Name: "derived",
			From: "busybox",
			Run:  []string{"echo built-by-step > /built", "echo step-output; id -u", "echo second >> /built"},
		}, &progress)
		if err != nil {
			t.Fatal(err)
		}
		b, err := readTemplateFile(tpl, "built")
		if err != nil || string(b) != "built-by-step\nsecond\n" {
			t.Fatalf("/built = %q, %v", b, err)
		}
		if _, err := os.Stat(filepath.Join(base.Rootfs, "built")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the parent changed: %v", err)
		}
		log, _ := os.ReadFile(tpl.BuildLog)
		for _, want := range []string{"==> from busybox", "==> [2/3] RUN (as root) echo step-output; id -u", "step-output\n0\n", "==> ready: derived"} {
			if !strings.Contains(string(log), want) || !strings.Contains(progress.String(), want) {
				t.Errorf("%q missing from log or progress; log:\n%s", want, log)
			}
		}
		if tpl.From != "busybox" || len(tpl.Layers) != 3 || tpl.SizeBytes == 0 || tpl.Rootfs != base.Rootfs {
			t.Errorf("meta = %+v", tpl)
		}
	})

	t.Run("a failing step leaves no template and keeps its log", func(t *testing.T) {
		_, err := store.Build(ctx, template.Spec{
			Name: "broken",
			From: "busybox",
			Run:  []string{"echo before-failure", "echo partial > /partial; exit 3", "echo never"},
		}, nil)
		if err == nil || !strings.Contains(err.Error(), "exit status 3") {
			t.Fatalf("err = %v, want step 2's exit status 3", err)
		}
		if _, err := store.Get("broken"); !errors.Is(err, template.ErrNotFound) {
			t.Fatalf("Get after failure: %v, want ErrNotFound", err)
		}
		if left, _ := filepath.Glob(filepath.Join(store.Dir(), ".build-*")); len(left) > 0 {
			t.Fatalf("half-made builds left: %v", left)
		}
		log, err := os.ReadFile(store.FailedLog("broken"))
		if err != nil || !strings.Contains(string(log), "before-failure") || strings.Contains(string(log), "never") {
			t.Fatalf("failed log = %q, %v", log, err)
		}
	})

	t.Run("a cancelled build leaves no template", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		_, err := store.Build(ctx, template.Spec{Name: "cancelled", From: "busybox", Run: []string{"sleep 30"}}, nil)
		if err == nil {
			t.Fatal("build succeeded")
		}
		if _, err := store.Get("cancelled"); !errors.Is(err, template.ErrNotFound) {
			t.Fatalf("Get: %v, want ErrNotFound", err)
		}
		if left, _ := filepath.Glob(filepath.Join(store.Dir(), ".build-*")); len(left) > 0 {
			t.Fatalf("half-made builds left: %v", left)
		}
	})

	t.Run("a sandbox runs on a built template", func(t *testing.T) {
		tpl, err := store.Get("derived")
		if err != nil {
			t.Fatal(err)
		}
		id := newID("tpl")
		sb, err := rt.Create(ctx, runtime.Spec{ID: id, Rootfs: tpl.Rootfs, Layers: tpl.LayerDirs, Args: []string{"/bin/cat", "/built"}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rt.Destroy(ctx, id) })
		if err := rt.Start(ctx, id); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		out.ReadFrom(sb.Stdout)
		if out.String() != "built-by-step\nsecond\n" {
			t.Fatalf("stdout = %q", out.String())
		}
	})

	t.Run("names are unique, listed and removable", func(t *testing.T) {
		if _, err := store.Build(ctx, template.Spec{Name: "derived", From: "busybox"}, nil); !errors.Is(err, template.ErrExists) {
			t.Fatalf("second build of a name: %v, want ErrExists", err)
		}
		if _, err := store.Build(ctx, template.Spec{Name: "orphan", From: "missing"}, nil); !errors.Is(err, template.ErrNotFound) {
			t.Fatalf("build from a missing parent: %v, want ErrNotFound", err)
		}
		if _, err := store.Build(ctx, template.Spec{Name: "Bad/Name"}, nil); !errors.Is(err, template.ErrInvalid) {
			t.Fatalf("bad name: %v, want ErrInvalid", err)
		}
		list, err := store.List()
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, tpl := range list {
			names = append(names, tpl.Name)
		}
		if strings.Join(names, ",") != "busybox,derived" {
			t.Fatalf("List = %v", names)
		}
		if err := store.Remove("derived"); err != nil {
			t.Fatal(err)
		}
		if _, err := store.Get("derived"); !errors.Is(err, template.ErrNotFound) {
			t.Fatalf("Get after Remove: %v", err)
		}
		if err := store.Remove("derived"); !errors.Is(err, template.ErrNotFound) {
			t.Fatalf("second Remove: %v, want ErrNotFound", err)
		}
	})
}

// readTemplateFile reads name from a template's topmost layer that has it, else its rootfs,
// as the overlay a sandbox mounts would.
func readTemplateFile(tpl *template.Template, name string) ([]byte, error) {
	for _, d := range tpl.LayerDirs {
		if b, err := os.ReadFile(filepath.Join(d, name)); err == nil {
			return b, nil
		}
	}
	return os.ReadFile(filepath.Join(tpl.Rootfs, name))
}

func TestOpenRemovesInterruptedBuilds(t *testing.T) {
	data := t.TempDir()
	leftover := filepath.Join(data, "templates", ".build-x-1234", "rootfs")
	if err := os.MkdirAll(leftover, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := template.Open(data, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Dir(leftover)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("leftover build still there: %v", err)
	}
}

// TestBuildDebianBase debootstraps the real base template (≈ 40 s and the Debian mirror):
// run it with COVE_TEST_DEBOOTSTRAP=1.
func TestBuildDebianBase(t *testing.T) {
	if os.Getenv("COVE_TEST_DEBOOTSTRAP") != "1" {
		t.Skip("template: set COVE_TEST_DEBOOTSTRAP=1 to debootstrap a base template (≈ 40 s, needs the Debian mirror)")
	}
	rt := runtimetest.Runc(t)
	ctx := context.Background()
	store, err := template.Open(t.TempDir(), rt)
	if err != nil {
		t.Fatal(err)
	}
	var progress bytes.Buffer
	t0 := time.Now()
	tpl, err := store.Build(ctx, template.Spec{Name: "base"}, &progress)
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	t.Logf("base built in %s, %d MB", time.Since(t0), tpl.SizeBytes>>20)
	if tpl.Key != template.BaseKey("") {
		t.Errorf("meta key %q, want BaseKey %q", tpl.Key, template.BaseKey(""))
	}
	for _, p := range []string{"usr/bin/python3", "usr/bin/python", "usr/bin/pip", "usr/bin/git", "usr/bin/curl", "bin/bash", "bin/ps",
		"usr/bin/ip", "usr/bin/sudo", "etc/sudoers.d/user", "etc/pip.conf", "etc/ssl/certs/ca-certificates.crt"} {
		if _, err := os.Stat(filepath.Join(tpl.Rootfs, p)); err != nil {
			t.Errorf("base lacks %s: %v", p, err)
		}
	}
	if lists, _ := filepath.Glob(filepath.Join(tpl.Rootfs, "var/lib/apt/lists/*_Packages")); len(lists) > 0 {
		t.Errorf("apt lists kept: %v", lists)
	}
	if fi, err := os.Stat(filepath.Join(tpl.Rootfs, "home/user")); err != nil || fi.Sys() == nil {
		t.Errorf("no /home/user: %v", err)
	}
	out, err := exec.Command("chroot", tpl.Rootfs, "stat", "-c", "%u:%g %U", "/home/user").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "1000:1000 user" {
		t.Errorf("/home/user owner = %q, %v", out, err)
	}

	t.Run("a sandbox on the base runs python3 as user", func(t *testing.T) {
		id := newID("base")
		sb, err := rt.Create(ctx, runtime.Spec{ID: id, Rootfs: tpl.Rootfs, UID: 1000, GID: 1000, Cwd: "/home/user",
			Args: []string{"/usr/bin/python3", "-c", "import os,socket; print(os.getuid(), socket.gethostname(), os.getcwd())"}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rt.Destroy(ctx, id) })
		if err := rt.Start(ctx, id); err != nil {
			t.Fatal(err)
		}
		var stdout bytes.Buffer
		stdout.ReadFrom(sb.Stdout)
		if want := "1000 " + id + " /home/user\n"; stdout.String() != want {
			t.Fatalf("stdout = %q, want %q", stdout.String(), want)
		}
	})
	t.Run("user has passwordless sudo in a sandbox on the base", func(t *testing.T) {
		out := runOn(t, rt, "sudo", runtime.Spec{Rootfs: tpl.Rootfs, UID: 1000, GID: 1000, Cwd: "/home/user",
			Args: []string{"/usr/bin/sudo", "-n", "id", "-u"}})
		if out != "0\n" {
			t.Fatalf("sudo -n id -u as user: stdout %q, want 0", out)
		}
	})
	t.Run("a derived template installs a package over the host network", func(t *testing.T) {
		d, err := store.Build(ctx, template.Spec{Name: "with-jq", From: "base", Run: []string{"apt-get update -q && apt-get install -y -q --no-install-recommends jq && rm -rf /var/lib/apt/lists/*"}}, &progress)
		if err != nil {
			t.Fatalf("%v\n%s", err, progress.String())
		}
		if _, err := os.Stat(filepath.Join(d.Rootfs, "usr/bin/jq")); err != nil {
			t.Fatal(err)
		}
		if docs, _ := filepath.Glob(filepath.Join(d.Rootfs, "usr/share/man/man1/jq*")); len(docs) > 0 {
			t.Errorf("dpkg excludes ignored: %v", docs)
		}
	})
}
