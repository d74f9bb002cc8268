package build_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cove-dev/cove/internal/blob"
	"github.com/cove-dev/cove/internal/builder/template"
	"github.com/cove-dev/cove/internal/builder/template/build"
	"github.com/cove-dev/cove/internal/sandbox/runtime"
	"github.com/cove-dev/cove/internal/sandbox/runtime/runtimetest"
)

// TestReplica: a template built in steps on one store (one node) is listed by another store
// sharing its records (a cluster's one database) at once, and, with the object store, found
// there: fetched whole (its root and layers, a deleted file's whiteout among them) and started;
// rebuilt on the first, the second fetches the new build; removed on the first, it is gone
// from the second too, although that one keeps a copy of its files, and the name is free
// there.
func TestReplica(t *testing.T) {
	ctx := context.Background()
	rt := runtimetest.Runc(t)
	shared := t.TempDir() // the records every node shares
	openAt := func(dir string) *build.Builder {
		t.Helper()
		s, err := template.OpenAt(ctx, dir, build.TestRecords(t, shared))
		if err != nil {
			t.Fatal(err)
		}
		return build.New(s, rt)
	}
	open := func() *build.Builder { return openAt(filepath.Join(t.TempDir(), "templates")) }
	objects, err := blob.OpenDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	a := open()
	a.SetReplica(&template.Replica{Blobs: objects})
	if _, err := a.Import(ctx, "busybox", runtimetest.BusyboxRootfs(t), nil); err != nil {
		t.Fatal(err)
	}
	buildTpl := func(made string) {
		t.Helper()
		if _, err := a.Build(ctx, build.Spec{Name: "shared", From: "busybox", Replace: true, Steps: []template.Step{
			{Kind: template.StepRun, Args: []string{"echo " + made + " > /made && rm /bin/true", "root"}},
		}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	buildTpl("built-on-a")

	b := open()
	if all, err := b.List(); err != nil || len(all) != 2 {
		t.Fatalf("another node lists %d templates, %v; want busybox and shared", len(all), err)
	}
	if _, err := b.Get("shared"); !errors.Is(err, template.ErrNotFound) {
		t.Fatalf("a store without the object store has its files: %v", err)
	}
	b.SetReplica(&template.Replica{Blobs: objects})
	sees := func(want string) {
		t.Helper()
		tpl, err := b.Get("shared")
		if err != nil {
			t.Fatalf("fetch from the object store: %v", err)
		}
		out := runOn(t, rt, "replica-"+want, runtime.Spec{Rootfs: tpl.Rootfs, Layers: tpl.LayerDirs,
			Args: []string{"/bin/sh", "-c", "cat /made; test -e /bin/true && echo true-is-back || echo true-is-gone"}})
		if !strings.Contains(out, want) || !strings.Contains(out, "true-is-gone") {
			t.Fatalf("a sandbox of the fetched template sees %q, want %s and true-is-gone", out, want)
		}
	}
	sees("built-on-a")
	buildTpl("rebuilt-on-a")
	sees("rebuilt-on-a")

	if err := a.Remove("shared"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Get("shared"); !errors.Is(err, template.ErrNotFound) {
		t.Fatalf("a template removed on another node: %v", err)
	}
	if _, err := open().Get("shared"); !errors.Is(err, template.ErrNotFound) {
		t.Fatalf("a node opened after the removal found it: %v", err)
	}
	// The name is free on every node: the one holding a copy builds it anew over the copy.
	if _, err := b.Build(ctx, build.Spec{Name: "shared", From: "busybox", Steps: []template.Step{
		{Kind: template.StepRun, Args: []string{"echo built-on-b > /made", "root"}},
	}}, nil); err != nil {
		t.Fatalf("build a removed template's name on a node holding a copy of it: %v", err)
	}
	if tpl, err := a.Get("shared"); err != nil || len(tpl.Layers) != 1 {
		t.Fatalf("the build on b, on a: %+v, %v", tpl, err)
	}
	// A template removed through another node than the one that built it stays removed
	// when the builder opens its store again: its tree is the cluster's, never adopted.
	if err := a.Remove("shared"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Get("shared"); !errors.Is(err, template.ErrNotFound) {
		t.Fatalf("on b, after a removed it: %v", err)
	}
	if _, err := openAt(b.Dir()).Get("shared"); !errors.Is(err, template.ErrNotFound) {
		t.Fatalf("b's store opened again found the template a removed: %v", err)
	}
}
