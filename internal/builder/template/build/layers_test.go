package build_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/cove-dev/cove/internal/builder/template"
	"github.com/cove-dev/cove/internal/builder/template/build"
	"github.com/cove-dev/cove/internal/sandbox/runtime"
	"github.com/cove-dev/cove/internal/sandbox/runtime/runtimetest"
)

// uploads is a FileSource of archives the test packs from a context directory, as the SDK would.
type uploads struct{ dir string }

func (u uploads) add(t *testing.T, ctxDir, src, dest string) string {
	t.Helper()
	var buf bytes.Buffer
	hash, err := build.ArchiveContext(ctxDir, src, dest, &buf)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(u.dir, hash+".tar"), buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return hash
}

func TestLayeredTemplates(t *testing.T) {
	rt, store := busyboxStore(t)
	ctx := context.Background()
	up := uploads{dir: t.TempDir()}
	files := build.DirSource(up.dir)
	ctxDir := t.TempDir()
	os.MkdirAll(filepath.Join(ctxDir, "app/sub"), 0o755)
	os.WriteFile(filepath.Join(ctxDir, "app/run.sh"), []byte("#!/bin/sh\necho app-ran\n"), 0o644)
	os.WriteFile(filepath.Join(ctxDir, "app/sub/data.txt"), []byte("data\n"), 0o600)
	os.WriteFile(filepath.Join(ctxDir, "hello.txt"), []byte("hello\n"), 0o644)
	appHash := up.add(t, ctxDir, "app", "/opt/app")
	helloHash := up.add(t, ctxDir, "hello.txt", "/home/user/")

	steps := func(last string) []template.Step {
		return []template.Step{
			{Kind: template.StepCopy, Args: []string{"app", "/opt/app", "1000:1000", "0755"}, FilesHash: appHash},
			{Kind: template.StepEnv, Args: []string{"GREETING", "hi", "MODE", "test"}},
			{Kind: template.StepRun, Args: []string{"rm /bin/vi; echo $GREETING-$MODE > /greeting", "root"}},
			{Kind: template.StepUser, Args: []string{"user"}},
			{Kind: template.StepWorkdir, Args: []string{"/home/user/work"}},
			{Kind: template.StepCopy, Args: []string{"hello.txt", "/home/user/", "user"}, FilesHash: helloHash},
			{Kind: template.StepRun, Args: []string{last}},
		}
	}
	buildTpl := func(t *testing.T, name, last string, mut func(*build.Spec)) *template.Template {
		t.Helper()
		spec := build.Spec{Name: name, From: "busybox", Steps: steps(last), Files: files, Replace: true,
			StartCmd: "sleep infinity", ReadyCmd: "true", CPUCount: 1, MemoryMB: 256}
		if mut != nil {
			mut(&spec)
		}
		tpl, err := store.Build(ctx, spec, nil)
		if err != nil {
			t.Fatal(err)
		}
		return tpl
	}

	var first *template.Template
	t.Run("steps become layers that a sandbox sees through one overlay", func(t *testing.T) {
		first = buildTpl(t, "app", "id -u > whoami; pwd >> whoami", nil)
		if len(first.Layers) != 5 { // COPY, RUN, WORKDIR, COPY, RUN
			t.Fatalf("layers = %d, want 5: %+v", len(first.Layers), first.Built)
		}
		out := runOn(t, rt, "layered", runtime.Spec{Rootfs: first.Rootfs, Layers: first.LayerDirs, Args: []string{"/bin/sh", "-c",
			`cat /greeting /home/user/work/whoami; /opt/app/run.sh; stat -c '%a %u:%g %n' /opt/app/run.sh /opt/app/sub/data.txt /home/user/hello.txt; test -e /bin/vi && echo vi-still-there; true`}})
		want := "hi-test\n1000\n/home/user/work\napp-ran\n755 1000:1000 /opt/app/run.sh\n755 1000:1000 /opt/app/sub/data.txt\n644 1000:1000 /home/user/hello.txt\n"
		if out != want {
			t.Fatalf("sandbox saw:\n%s\nwant:\n%s", out, want)
		}
		if first.Env["GREETING"] != "hi" || first.User != "user" || first.Workdir != "/home/user/work" ||
			first.StartCmd != "sleep infinity" || first.CPUCount != 1 || first.MemoryMB != 256 {
			t.Fatalf("configuration = %+v", first)
		}
		if _, err := os.Stat(filepath.Join(first.Rootfs, "bin/vi")); err != nil {
			t.Fatalf("the root template changed: %v", err)
		}
	})

	t.Run("a rebuild with nothing changed reuses every layer", func(t *testing.T) {
		again := buildTpl(t, "app", "id -u > whoami; pwd >> whoami", nil)
		for _, r := range again.Built {
			if r.Layer != "" && !r.Cached {
				t.Errorf("step %q was rebuilt", r.Step)
			}
		}
		if strings.Join(again.Layers, ",") != strings.Join(first.Layers, ",") {
			t.Fatalf("layers changed: %v vs %v", again.Layers, first.Layers)
		}
	})

	t.Run("changing a copied file rebuilds that step and every one above it", func(t *testing.T) {
		os.WriteFile(filepath.Join(ctxDir, "hello.txt"), []byte("hello, changed\n"), 0o644)
		changed := up.add(t, ctxDir, "hello.txt", "/home/user/")
		if changed == helloHash {
			t.Fatal("the files hash did not change with the content")
		}
		tpl := buildTpl(t, "app-changed", "id -u > whoami; pwd >> whoami", func(s *build.Spec) { s.Steps[5].FilesHash = changed })
		var cache []string
		for _, r := range tpl.Built {
			if r.Layer != "" {
				cache = append(cache, map[bool]string{true: "hit", false: "miss"}[r.Cached])
			}
		}
		if got := strings.Join(cache, ","); got != "hit,hit,hit,miss,miss" {
			t.Fatalf("cache = %s, want hit,hit,hit,miss,miss", got)
		}
		b, err := readTemplateFile(tpl, "home/user/hello.txt")
		if err != nil || string(b) != "hello, changed\n" {
			t.Fatalf("hello.txt = %q, %v", b, err)
		}
	})

	t.Run("force rebuilds every step", func(t *testing.T) {
		tpl := buildTpl(t, "app-forced", "id -u > whoami; pwd >> whoami", func(s *build.Spec) { s.Force = true })
		for _, r := range tpl.Built {
			if r.Cached {
				t.Errorf("step %q came from the cache", r.Step)
			}
		}
	})

	t.Run("ls shows what each template owns and shares", func(t *testing.T) {
		use, err := store.Usage()
		if err != nil {
			t.Fatal(err)
		}
		bbUse, app := use["busybox"], use["app"]
		if app.Shared < bbUse.Own || app.Own == 0 {
			t.Fatalf("app usage = %+v, busybox = %+v", app, bbUse)
		}
		if app.Own+app.Shared-bbUse.Own >= bbUse.Own {
			t.Errorf("app's layers take %d bytes, the root %d", app.Own+app.Shared-bbUse.Own, bbUse.Own)
		}
	})

	t.Run("removing a template frees only the layers nothing else uses", func(t *testing.T) {
		if first == nil {
			t.Skip("the first build failed")
		}
		shared := first.Layers[0]
		changedTpl, _ := store.Get("app-changed")
		only := changedTpl.Layers[4]
		if err := store.Remove("app-changed"); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(store.LayerDiff(only)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("app-changed's own layer is still there: %v", err)
		}
		if _, err := os.Stat(store.LayerDiff(shared)); err != nil {
			t.Fatalf("a layer app still uses was removed: %v", err)
		}
		if err := store.Remove("busybox"); !errors.Is(err, template.ErrInUse) {
			t.Fatalf("remove the root of app: %v, want ErrInUse", err)
		}
		for _, n := range []string{"app", "app-forced"} {
			if err := store.Remove(n); err != nil {
				t.Fatal(err)
			}
		}
		left, _ := os.ReadDir(filepath.Join(store.Dir(), ".layers"))
		if len(left) != 0 {
			t.Fatalf("layers left after removing every template: %v", left)
		}
	})

	t.Run("a failing step fails the build with its exit code and last lines, leaving nothing", func(t *testing.T) {
		_, err := store.Build(ctx, build.Spec{Name: "bad", From: "busybox", Files: files, Steps: []template.Step{
			{Kind: template.StepRun, Args: []string{"echo fine"}},
			{Kind: template.StepRun, Args: []string{"echo line-one; echo line-two >&2; exit 7"}},
		}}, nil)
		var se *build.StepError
		var ee *build.ExitError
		if !errors.As(err, &se) || se.Index != 2 || !errors.As(err, &ee) || ee.Code != 7 {
			t.Fatalf("err = %v, want step 2 exiting 7", err)
		}
		if !strings.Contains(err.Error(), "line-one") || !strings.Contains(err.Error(), "line-two") {
			t.Fatalf("err = %v, want the step's last lines", err)
		}
		if _, err := store.Get("bad"); !errors.Is(err, template.ErrNotFound) {
			t.Fatalf("Get: %v", err)
		}
		if left, _ := filepath.Glob(filepath.Join(store.Dir(), ".layers", ".build-*")); len(left) > 0 {
			t.Fatalf("half-made layers left: %v", left)
		}
	})

	t.Run("bad steps are refused before anything runs", func(t *testing.T) {
		for _, st := range []template.Step{
			{Kind: "FROB", Args: []string{"x"}},
			{Kind: template.StepEnv, Args: []string{"ONLY_KEY"}},
			{Kind: template.StepCopy, Args: []string{"a", "/b", "", "99x"}, FilesHash: appHash},
			{Kind: template.StepCopy, Args: []string{"a", "/b"}},
			{Kind: template.StepRun},
		} {
			if _, err := store.Build(ctx, build.Spec{Name: "bad", From: "busybox", Steps: []template.Step{st}}, nil); !errors.Is(err, template.ErrInvalid) {
				t.Errorf("step %+v: %v, want ErrInvalid", st, err)
			}
		}
	})
}

func TestTagsKeepTheirBuild(t *testing.T) {
	_, store := busyboxStore(t)
	ctx := context.Background()
	buildTpl := func(name, content string) *template.Template {
		tpl, err := store.Build(ctx, build.Spec{Name: name, From: "busybox", Replace: true,
			Steps: []template.Step{{Kind: template.StepRun, Args: []string{"echo " + content + " > /version", "root"}}}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return tpl
	}
	one := buildTpl("app", "one")
	if _, err := store.SetTag("app", "v1"); err != nil {
		t.Fatal(err)
	}
	buildTpl("app", "two")
	buildTpl("other", "x")
	if err := store.Remove("other"); err != nil { // sweeps unreferenced layers
		t.Fatal(err)
	}
	v1, err := store.Get("app:v1")
	if err != nil {
		t.Fatal(err)
	}
	if b, err := readTemplateFile(v1, "version"); err != nil || string(b) != "one\n" {
		t.Fatalf("app:v1 /version = %q, %v", b, err)
	}
	if latest, _ := store.Get("app:default"); latest == nil || latest.Layers[0] == one.Layers[0] {
		t.Fatalf("app:default is not the latest build: %+v", latest)
	}
	tags, err := store.Tags("app")
	if err != nil || len(tags) != 2 || tags[1].Tag != "v1" {
		t.Fatalf("tags = %+v, %v", tags, err)
	}
	onV1, err := store.Build(ctx, build.Spec{Name: "on-v1", From: "app:v1",
		Steps: []template.Step{{Kind: template.StepRun, Args: []string{"cat /version > /seen", "root"}}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := readTemplateFile(onV1, "seen"); string(b) != "one\n" {
		t.Fatalf("a template built from app:v1 saw %q", b)
	}
	if err := store.Remove("on-v1"); err != nil {
		t.Fatal(err)
	}
	if err := store.RemoveTag("app", "v1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(store.LayerDiff(one.Layers[0])); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the untagged build's layer is still there: %v", err)
	}
	if _, err := store.Get("app:v1"); !errors.Is(err, template.ErrNotFound) {
		t.Fatalf("Get of a removed tag: %v", err)
	}
}

func TestBuildsOfOneNameAreSerialized(t *testing.T) {
	_, store := busyboxStore(t)
	ctx := context.Background()
	var mu sync.Mutex
	var lines []string // every line of both builds, as written, tagged with the build
	spec := func(who string) build.Spec {
		return build.Spec{Name: "same", From: "busybox", Replace: true,
			Steps: []template.Step{{Kind: template.StepRun, Args: []string{"echo " + who + "; sleep 0.2; echo " + who + "-done", "root"}}},
			Log: func(_, line string) {
				mu.Lock()
				lines = append(lines, who+": "+line)
				mu.Unlock()
			}}
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, who := range []string{"a", "b"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = store.Build(ctx, spec(who), nil)
		}()
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("builds: %v, %v", errs[0], errs[1])
	}
	// Serialized: the lines of one build all come before the other's.
	switches := 0
	for i := 1; i < len(lines); i++ {
		if lines[i][0] != lines[i-1][0] {
			switches++
		}
	}
	if switches != 1 {
		t.Fatalf("the builds interleaved:\n%s", strings.Join(lines, "\n"))
	}
	last := lines[len(lines)-1][:1]
	tpl, err := store.Get("same")
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := readTemplateFile(tpl, "etc/passwd"); len(b) == 0 || !strings.Contains(tpl.Built[0].Step, "echo "+last) {
		t.Fatalf("the template is not the last build's (%s): %+v", last, tpl.Built)
	}
}

// busyboxStore is a template store of the test's own holding the busybox test rootfs as the
// template "busybox", and the runc runtime its builds use.
func busyboxStore(t *testing.T) (*runtime.Runc, *build.Builder) {
	t.Helper()
	rt := runtimetest.Runc(t)
	store, err := build.OpenData(t, t.TempDir(), rt)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Import(context.Background(), "busybox", runtimetest.BusyboxRootfs(t), nil); err != nil {
		t.Fatal(err)
	}
	return rt, store
}

func TestLayersARunningSandboxStacksAreKept(t *testing.T) {
	rt, store := busyboxStore(t)
	ctx := context.Background()
	buildTpl := func(name string) *template.Template {
		tpl, err := store.Build(ctx, build.Spec{Name: name, From: "busybox",
			Steps: []template.Step{{Kind: template.StepRun, Args: []string{"echo " + name + " > /name", "root"}}}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return tpl
	}
	inUse := buildTpl("in-use")
	id := newID("keep")
	if _, err := rt.Create(ctx, runtime.Spec{ID: id, Rootfs: inUse.Rootfs, Layers: inUse.LayerDirs, Args: []string{"/bin/sleep", "60"}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Destroy(ctx, id) })
	if err := store.Remove("in-use"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(store.LayerDiff(inUse.Layers[0])); err != nil {
		t.Fatalf("a layer a sandbox runs on was freed: %v", err)
	}
	if err := rt.Destroy(ctx, id); err != nil {
		t.Fatal(err)
	}
	buildTpl("other")
	if err := store.Remove("other"); err != nil { // the next sweep
		t.Fatal(err)
	}
	if _, err := os.Stat(store.LayerDiff(inUse.Layers[0])); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the layer outlived its last sandbox: %v", err)
	}
}
