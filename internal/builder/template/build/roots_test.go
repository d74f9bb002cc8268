package build

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/cove-dev/cove/internal/builder/template"
	"github.com/cove-dev/cove/internal/sandbox/runtime/runtimetest"
)

// TestChangedBootstrapFreesTheOldRoot rebuilds a template whose BOOTSTRAP line changed (its
// roots made from the test busybox, standing in for debootstrap): the new line's root is
// used, and the old one, which nothing is built on any more, is removed.
func TestChangedBootstrapFreesTheOldRoot(t *testing.T) {
	rt := runtimetest.Runc(t)
	ctx := context.Background()
	s, err := openData(t, t.TempDir(), rt)
	if err != nil {
		t.Fatal(err)
	}
	bb := runtimetest.BusyboxRootfs(t)
	oldLine, newLine := template.Bootstrap{Suite: "bookworm", Include: []string{"git"}}, template.Bootstrap{Suite: "bookworm", Include: []string{"git", "curl"}}
	// makeRoot stands in for debootstrap: b's root, the test busybox.
	makeRoot := func(b template.Bootstrap) {
		root := &template.Template{Name: b.RootName(), Suite: b.Suite, Include: b.Include, Key: b.Key(), Bootstrap: &b}
		if _, err := s.importRoot(ctx, root, nil, func(rootfs string, out *lineWriter) error { return copyTree(ctx, bb, rootfs, out) }); err != nil {
			t.Fatal(err)
		}
	}
	build := func(b template.Bootstrap) (*template.Template, string) {
		var progress bytes.Buffer
		tpl, err := s.Build(ctx, Spec{Name: "based", Bootstrap: &b, Replace: true,
			Steps: []template.Step{{Kind: template.StepRun, Args: []string{"echo on > /on", "root"}}}}, &progress)
		if err != nil {
			t.Fatalf("%v\n%s", err, progress.String())
		}
		return tpl, progress.String()
	}
	makeRoot(oldLine)
	if tpl, _ := build(oldLine); tpl.Root != oldLine.RootName() {
		t.Fatalf("root %s, want %s", tpl.Root, oldLine.RootName())
	}
	makeRoot(newLine) // after that build: it would have freed a root nothing used yet
	tpl, progress := build(newLine)
	if tpl.Root != newLine.RootName() || !strings.Contains(progress, "bootstrapped roots nothing uses") {
		t.Fatalf("root %s; progress:\n%s", tpl.Root, progress)
	}
	if _, err := s.Get(oldLine.RootName()); !errors.Is(err, template.ErrNotFound) {
		t.Fatalf("the old root: %v, want it removed", err)
	}
	if _, err := s.Get(newLine.RootName()); err != nil {
		t.Fatalf("the new root: %v", err)
	}
}
