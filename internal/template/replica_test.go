package template_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/cove-dev/cove/internal/blob"
	"github.com/cove-dev/cove/internal/runtime"
	"github.com/cove-dev/cove/internal/template"
)

// TestReplica: a template built in steps on one store (one node) is found by another store
// sharing the object store, which never built it: fetched whole (its root and layers, a
// deleted file's whiteout among them) and started there; removed on the first, it is fetched
// no more.
func TestReplica(t *testing.T) {
	rt, a := busyboxStore(t)
	objects, err := blob.OpenDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	a.SetReplica(&template.Replica{Blobs: objects})
	ctx := context.Background()
	if _, err := a.Build(ctx, template.Spec{Name: "shared", From: "busybox", Steps: []template.Step{
		{Kind: template.StepRun, Args: []string{"echo built-on-a > /made && rm /bin/true", "root"}},
	}}, nil); err != nil {
		t.Fatal(err)
	}

	b, err := template.Open(t.TempDir(), rt)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Get("shared"); !errors.Is(err, template.ErrNotFound) {
		t.Fatalf("a store without the object store found it: %v", err)
	}
	b.SetReplica(&template.Replica{Blobs: objects})
	tpl, err := b.Get("shared")
	if err != nil {
		t.Fatalf("fetch from the object store: %v", err)
	}
	out := runOn(t, rt, "replica", runtime.Spec{Rootfs: tpl.Rootfs, Layers: tpl.LayerDirs,
		Args: []string{"/bin/sh", "-c", "cat /made; test -e /bin/true && echo true-is-back || echo true-is-gone"}})
	if !strings.Contains(out, "built-on-a") || !strings.Contains(out, "true-is-gone") {
		t.Fatalf("a sandbox of the fetched template sees %q, want built-on-a and true-is-gone", out)
	}
	if err := a.Remove("shared"); err != nil {
		t.Fatal(err)
	}
	c, err := template.Open(t.TempDir(), rt)
	if err != nil {
		t.Fatal(err)
	}
	c.SetReplica(&template.Replica{Blobs: objects})
	if _, err := c.Get("shared"); !errors.Is(err, template.ErrNotFound) {
		t.Fatalf("a removed template was fetched: %v", err)
	}
}
