package build_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/cove-dev/cove/internal/builder/template"
	"github.com/cove-dev/cove/internal/builder/template/build"
)

// A template may be called anything ValidName takes, "layers" included: the store's own
// directories live where no name can reach.
func TestATemplateNamedLayersLeavesTheLayerStoreAlone(t *testing.T) {
	_, store := busyboxStore(t)
	ctx := context.Background()
	step := func(s string) []template.Step {
		return []template.Step{{Kind: template.StepRun, Args: []string{"echo " + s + " > /made-by", "root"}}}
	}
	app, err := store.Build(ctx, build.Spec{Name: "app", From: "busybox", Steps: step("app")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Replace, as every API build does: the publish swaps whatever has the name.
	if _, err := store.Build(ctx, build.Spec{Name: "layers", From: "busybox", Steps: step("tenant"), Replace: true}, nil); err != nil {
		t.Fatal(err)
	}
	again, err := store.Get("app")
	if err != nil {
		t.Fatalf("app after a build named layers: %v", err)
	}
	for _, d := range again.LayerDirs {
		if b, err := os.ReadFile(filepath.Join(d, "made-by")); err != nil || string(b) != "app\n" {
			t.Fatalf("app's layer %s after a build named layers: %q, %v", d, b, err)
		}
	}
	if len(again.LayerDirs) != len(app.LayerDirs) {
		t.Fatalf("app has %d layers, had %d", len(again.LayerDirs), len(app.LayerDirs))
	}
	if tenant, err := store.Get("layers"); err != nil || tenant.Root != "busybox" {
		t.Fatalf("the template named layers: %+v, %v", tenant, err)
	}
}

// A store written by an earlier cove: templates in <store>/<name>, layers in
// <store>/layers, the directory 0755. Open moves the layers out of the names' way and
// closes the directory to other users; every template still resolves.
func TestOpenMigratesAStoreOfTheOldLayout(t *testing.T) {
	write := func(p, body string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old := func(t *testing.T) string {
		dir := filepath.Join(t.TempDir(), "templates")
		write(filepath.Join(dir, "busybox", "meta.json"), `{"name":"busybox","created_at":"2026-01-02T03:04:05Z","build_seconds":1,"size_bytes":1}`)
		write(filepath.Join(dir, "busybox", "rootfs", "etc", "hostname"), "root\n")
		write(filepath.Join(dir, "layers", "k1", "meta.json"), `{"key":"k1","parent":"root:busybox","step":"RUN echo","size_bytes":4,"created_at":"2026-01-02T03:04:05Z","build_seconds":1}`)
		write(filepath.Join(dir, "layers", "k1", "diff", "made-by"), "app\n")
		write(filepath.Join(dir, "app", "meta.json"), `{"name":"app","from":"busybox","root":"busybox","layers":["k1"],"created_at":"2026-01-02T03:04:05Z","build_seconds":1,"size_bytes":4}`)
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	check := func(t *testing.T, dir string) {
		t.Helper()
		store, err := build.OpenDir(t, dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		app, err := store.Get("app")
		if err != nil {
			t.Fatalf("app after the migration: %v", err)
		}
		if len(app.LayerDirs) != 1 || app.LayerDirs[0] != filepath.Join(dir, ".layers", "k1", "diff") {
			t.Fatalf("app's layers: %v", app.LayerDirs)
		}
		if b, err := os.ReadFile(filepath.Join(app.LayerDirs[0], "made-by")); err != nil || string(b) != "app\n" {
			t.Fatalf("app's layer: %q, %v", b, err)
		}
		// A link stays for a cove of the old layout: it is no template, and leads to .layers.
		if link, err := os.Readlink(filepath.Join(dir, "layers")); err != nil || link != ".layers" {
			t.Fatalf("the old layers directory is %q, %v; want a link to .layers", link, err)
		}
		if _, err := store.Get("layers"); !errors.Is(err, template.ErrNotFound) {
			t.Fatalf("Get(layers) = %v, want ErrNotFound", err)
		}
		if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
			t.Fatalf("store directory mode %v, %v; want 0700", fi.Mode(), err)
		}
		if all, err := store.List(); err != nil || len(all) != 2 {
			t.Fatalf("List = %d templates, %v; want busybox and app", len(all), err)
		}
		// A template named layers takes the link's place; the layers stay.
		src := t.TempDir()
		if _, err := store.Import(context.Background(), "layers", src, nil); err != nil {
			t.Fatalf("import a template named layers: %v", err)
		}
		if _, err := store.Get("layers"); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(dir, ".layers", "k1", "diff", "made-by")); err != nil {
			t.Fatalf("app's layer after a template named layers: %v", err)
		}
	}

	t.Run("the layers move in one rename", func(t *testing.T) {
		check(t, old(t))
	})
	t.Run("a crash half-way through a merge is finished by the next open", func(t *testing.T) {
		dir := old(t)
		// A cove of the old layout ran after a migration: both directories hold layers.
		write(filepath.Join(dir, ".layers", "k0", "meta.json"), `{"key":"k0"}`)
		check(t, dir)
		if _, err := os.Stat(filepath.Join(dir, ".layers", "k0", "meta.json")); err != nil {
			t.Fatalf("the layer already in .layers: %v", err)
		}
	})
	t.Run("a store links a template of a store not yet migrated, leaving that store as it is", func(t *testing.T) {
		shared := old(t)
		own, err := build.OpenDir(t, filepath.Join(t.TempDir(), "own"), nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := template.Link(own.Dir(), shared, "app"); err != nil {
			t.Fatal(err)
		}
		app, err := own.Get("app")
		if err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(filepath.Join(app.LayerDirs[0], "made-by")); err != nil || string(b) != "app\n" {
			t.Fatalf("app's linked layer: %q, %v", b, err)
		}
		if _, err := os.Stat(filepath.Join(shared, "layers", "k1")); err != nil {
			t.Fatalf("the shared store changed: %v", err)
		}
	})
	t.Run("a template named layers is not taken for the old layer store", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "templates")
		write(filepath.Join(dir, "layers", "meta.json"), `{"name":"layers","created_at":"2026-01-02T03:04:05Z"}`)
		write(filepath.Join(dir, "layers", "rootfs", "f"), "x")
		store, err := build.OpenDir(t, dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.Get("layers"); err != nil {
			t.Fatalf("the template named layers: %v", err)
		}
	})
}

// The trees of a store are tenants' (setuid binaries of their images included): Open
// closes a store directory that group or others can reach.
func TestOpenClosesAStoreOthersCanReach(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "templates")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := build.OpenDir(t, dir, nil); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("store directory mode %v, %v; want 0700", fi.Mode(), err)
	}
	fresh := filepath.Join(t.TempDir(), "new", "templates")
	if _, err := build.OpenDir(t, fresh, nil); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(fresh); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("a new store directory mode %v, %v; want 0700", fi.Mode(), err)
	}
}

// A bootstrapped root is found by a name anyone can predict from the definition: a team's
// template of that name must never become the root every base stands on.
func TestATeamsTemplateNamedLikeABootstrapRootIsNotTakenForIt(t *testing.T) {
	_, store := busyboxStore(t)
	ctx := context.Background()
	b := template.Bootstrap{Suite: "bookworm", Include: []string{"sudo"}}
	if _, err := store.Build(ctx, build.Spec{Name: b.RootName(), From: "busybox", TeamID: "team-x", BuildID: "b1", Replace: true,
		Steps: []template.Step{{Kind: template.StepRun, Args: []string{"echo squatted > /squatted", "root"}}}}, nil); err != nil {
		t.Fatal(err)
	}
	_, err := store.Build(ctx, build.Spec{Name: "base-like", Bootstrap: &b}, nil)
	if !errors.Is(err, template.ErrExists) {
		t.Fatalf("a build on BOOTSTRAP %s over team-x's template %s: %v, want ErrExists", b.Suite, b.RootName(), err)
	}
	if _, err := store.Get("base-like"); !errors.Is(err, template.ErrNotFound) {
		t.Fatalf("base-like: %v, want no template", err)
	}
}

// Teams' uploaded build contexts are theirs: no other local user reads them.
func TestOpenBuildsClosesTheUploadsToOtherUsers(t *testing.T) {
	data := t.TempDir()
	if err := os.MkdirAll(filepath.Join(data, "uploads", "team-1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(data, "uploads"), 0o755); err != nil {
		t.Fatal(err)
	}
	store, err := build.OpenDir(t, filepath.Join(data, "templates"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := openBuilds(t, store, data); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(data, "uploads")); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("uploads directory mode %v, %v; want 0700", fi.Mode(), err)
	}
}
