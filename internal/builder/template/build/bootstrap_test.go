package build_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/cove-dev/cove/internal/builder/template"
	"github.com/cove-dev/cove/internal/builder/template/build"
	"github.com/cove-dev/cove/internal/sandbox/runtime/runtimetest"
)

func TestBootstrapValidate(t *testing.T) {
	for _, tt := range []struct {
		name string
		b    template.Bootstrap
		ok   bool
	}{
		{"a suite and packages are valid", template.Bootstrap{Suite: "bookworm", Include: []string{"python3", "libstdc++6", "g++"}}, true},
		{"a suite alone is valid", template.Bootstrap{Suite: "trixie"}, true},
		{"an empty suite is refused", template.Bootstrap{}, false},
		{"a suite with a slash is refused", template.Bootstrap{Suite: "../x"}, false},
		{"a package that looks like a flag is refused", template.Bootstrap{Suite: "bookworm", Include: []string{"--foreign"}}, false},
		{"a package with a comma is refused", template.Bootstrap{Suite: "bookworm", Include: []string{"a,b"}}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.b.Validate()
			if tt.ok != (err == nil) || (err != nil && !errors.Is(err, template.ErrInvalid)) {
				t.Fatalf("Validate() = %v, want ok %v", err, tt.ok)
			}
		})
	}
	t.Run("the root name follows the line", func(t *testing.T) {
		a := template.Bootstrap{Suite: "bookworm", Include: []string{"git"}}
		b := template.Bootstrap{Suite: "bookworm", Include: []string{"git", "curl"}}
		if a.RootName() == b.RootName() || !strings.HasPrefix(a.RootName(), "debian-bookworm-") || template.ValidName(a.RootName()) != nil {
			t.Fatalf("root names %q and %q", a.RootName(), b.RootName())
		}
	})
}

// TestBootstrapSteps builds a template whose first line is BOOTSTRAP on a root that exists
// already (busybox imported under the line's root name, so no debootstrap runs): the root is
// a cache hit, the steps are layers on it, and a changed step rebuilds from there only.
func TestBootstrapSteps(t *testing.T) {
	rt := runtimetest.Runc(t)
	ctx := context.Background()
	store, err := build.OpenData(t, t.TempDir(), rt)
	if err != nil {
		t.Fatal(err)
	}
	b := template.Bootstrap{Suite: "bookworm", Include: []string{"busybox"}}
	if _, err := store.Import(ctx, b.RootName(), runtimetest.BusyboxRootfs(t), nil); err != nil {
		t.Fatal(err)
	}
	steps := func(second string) []template.Step {
		return []template.Step{
			{Kind: template.StepRun, Args: []string{"echo one > /one", "root"}},
			{Kind: template.StepRun, Args: []string{second, "root"}},
			{Kind: template.StepRun, Args: []string{"echo three > /three", "root"}},
			{Kind: template.StepUser, Args: []string{"user"}},
			{Kind: template.StepWorkdir, Args: []string{"/home/user"}},
		}
	}
	buildTpl := func(t *testing.T, second string) (*template.Template, string) {
		t.Helper()
		var progress bytes.Buffer
		tpl, err := store.Build(ctx, build.Spec{Name: "based", Bootstrap: &b, Key: "def-1", Steps: steps(second), Replace: true}, &progress)
		if err != nil {
			t.Fatalf("%v\n%s", err, progress.String())
		}
		return tpl, progress.String()
	}
	cached := func(tpl *template.Template) []bool {
		var out []bool
		for _, r := range tpl.Built {
			out = append(out, r.Cached)
		}
		return out
	}

	first, progress := buildTpl(t, "echo two > /two")
	t.Run("the root is the bootstrap's, reused, and the steps are layers on it", func(t *testing.T) {
		if first.From != b.RootName() || first.Root != b.RootName() || len(first.Layers) != 4 || first.Key != "def-1" {
			t.Fatalf("template = from %q root %q, %d layers, key %q", first.From, first.Root, len(first.Layers), first.Key)
		}
		if first.User != "user" || first.Workdir != "/home/user" {
			t.Errorf("user %q workdir %q, want the definition's", first.User, first.Workdir)
		}
		if len(first.Built) != 6 || first.Built[0].Step != b.String() || !first.Built[0].Cached {
			t.Fatalf("built = %+v, want the BOOTSTRAP line first, cached", first.Built)
		}
		for _, want := range []string{"==> " + b.String(), "cached: root " + b.RootName(), "==> [3/5] RUN (as root) echo three"} {
			if !strings.Contains(progress, want) {
				t.Errorf("progress lacks %q:\n%s", want, progress)
			}
		}
		if got, err := readTemplateFile(first, "two"); err != nil || string(got) != "two\n" {
			t.Errorf("/two = %q, %v", got, err)
		}
	})
	t.Run("a rebuild with nothing changed takes every step from the cache", func(t *testing.T) {
		again, _ := buildTpl(t, "echo two > /two")
		for i, c := range cached(again) {
			if !c && again.Built[i].Layer != "" {
				t.Errorf("step %q ran again", again.Built[i].Step)
			}
		}
		if strings.Join(again.Layers, ",") != strings.Join(first.Layers, ",") {
			t.Errorf("layers changed: %v, were %v", again.Layers, first.Layers)
		}
	})
	t.Run("a changed step rebuilds from that step on", func(t *testing.T) {
		changed, _ := buildTpl(t, "echo TWO > /two")
		if got := cached(changed); got[0] != true || got[1] != true || got[2] != false || got[3] != false || got[5] != false {
			t.Fatalf("cached = %v, want the root and step 1 cached, steps 2 on rebuilt", got)
		}
		if changed.Layers[0] != first.Layers[0] || changed.Layers[1] == first.Layers[1] {
			t.Errorf("layers %v, were %v", changed.Layers, first.Layers)
		}
		if got, _ := readTemplateFile(changed, "two"); string(got) != "TWO\n" {
			t.Errorf("/two = %q", got)
		}
	})
	t.Run("ls shows the template's own layers and the root it shares", func(t *testing.T) {
		use, err := store.Usage()
		if err != nil {
			t.Fatal(err)
		}
		root, err := store.Get(b.RootName())
		if err != nil {
			t.Fatal(err)
		}
		if u := use["based"]; u.Shared != root.SizeBytes || u.Own <= 0 {
			t.Fatalf("usage of based = %+v, want shared %d (the root) and its own layers", u, root.SizeBytes)
		}
	})
	t.Run("a root others are built on is not replaced", func(t *testing.T) {
		_, err := store.Build(ctx, build.Spec{Name: b.RootName(), From: "based", Replace: true,
			Steps: []template.Step{{Kind: template.StepRun, Args: []string{"true", "root"}}}}, nil)
		if !errors.Is(err, template.ErrInUse) || !strings.Contains(err.Error(), "template based is built on it") {
			t.Fatalf("err = %v, want ErrInUse naming based", err)
		}
		if root, err := store.Get(b.RootName()); err != nil || root.Root != "" {
			t.Fatalf("the root after a refused replace: %+v, %v", root, err)
		}
	})
	t.Run("a spec with both a bootstrap and a from is refused", func(t *testing.T) {
		_, err := store.Build(ctx, build.Spec{Name: "both", From: "based", Bootstrap: &b}, nil)
		if !errors.Is(err, template.ErrInvalid) {
			t.Fatalf("err = %v, want ErrInvalid", err)
		}
		if _, err := store.Build(ctx, build.Spec{Name: "neither"}, nil); !errors.Is(err, template.ErrInvalid) {
			t.Fatalf("err = %v, want ErrInvalid", err)
		}
	})
}
