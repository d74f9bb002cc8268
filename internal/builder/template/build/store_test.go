package build_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/builder/template"
	"github.com/cove-dev/cove/internal/builder/template/build"
	"github.com/cove-dev/cove/internal/sandbox/runtime"
	"github.com/cove-dev/cove/internal/sandbox/runtime/runtimetest"
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
	store, err := build.OpenData(t, t.TempDir(), rt)
	if err != nil {
		t.Fatal(err)
	}
	base, err := store.Import(ctx, "busybox", bb, nil)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("run steps make layers on the parent, with their output in the log", func(t *testing.T) {
		var progress bytes.Buffer
		tpl, err := store.Build(ctx, build.Spec{
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
		_, err := store.Build(ctx, build.Spec{
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
		_, err := store.Build(ctx, build.Spec{Name: "cancelled", From: "busybox", Run: []string{"sleep 30"}}, nil)
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
		if _, err := store.Build(ctx, build.Spec{Name: "derived", From: "busybox"}, nil); !errors.Is(err, template.ErrExists) {
			t.Fatalf("second build of a name: %v, want ErrExists", err)
		}
		if _, err := store.Build(ctx, build.Spec{Name: "orphan", From: "missing"}, nil); !errors.Is(err, template.ErrNotFound) {
			t.Fatalf("build from a missing parent: %v, want ErrNotFound", err)
		}
		if _, err := store.Build(ctx, build.Spec{Name: "Bad/Name"}, nil); !errors.Is(err, template.ErrInvalid) {
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
	if _, err := build.OpenData(t, data, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Dir(leftover)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("leftover build still there: %v", err)
	}
}
