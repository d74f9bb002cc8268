package build_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/cove-dev/cove/internal/builder/template"
	"github.com/cove-dev/cove/internal/builder/template/build"
	"github.com/cove-dev/cove/internal/builder/template/build/oci"
	"github.com/cove-dev/cove/internal/builder/template/build/oci/ocitest"
	"github.com/cove-dev/cove/internal/sandbox/runtime"
	"github.com/cove-dev/cove/internal/sandbox/runtime/runtimetest"
)

func TestImages(t *testing.T) {
	rt := runtimetest.Runc(t)
	ctx := context.Background()
	store, err := build.OpenData(t, t.TempDir(), rt)
	if err != nil {
		t.Fatal(err)
	}
	img := ocitest.Image(t, runtimetest.BusyboxRootfs(t), map[string]string{"usr/local/bin/hello": "#!/bin/sh\necho hello from the image\n"},
		v1.Config{Env: []string{"PATH=/usr/local/bin:/bin", "FROM_IMAGE=yes"}, WorkingDir: "/tmp"})
	host := ocitest.Registry(t)
	ref := host + "/cove/busybox:1"
	ocitest.Push(t, ref, img)
	creds := oci.Credentials{Username: ocitest.User, Password: ocitest.Password}
	allow := oci.Guard{Registries: []string{host}} // the test registry is on loopback

	t.Run("a pull from a loopback registry the operator did not allow is refused", func(t *testing.T) {
		_, err := store.EnsureImage(ctx, ref, creds, oci.Guard{}, nil)
		if !errors.Is(err, oci.ErrRefused) || !strings.Contains(err.Error(), "127.0.0.1") {
			t.Fatalf("err = %v, want ErrRefused naming 127.0.0.1", err)
		}
	})

	t.Run("a pull without the registry's credentials fails", func(t *testing.T) {
		if _, err := store.EnsureImage(ctx, ref, oci.Credentials{}, allow, nil); err == nil || !strings.Contains(err.Error(), "401") && !strings.Contains(strings.ToLower(err.Error()), "unauthorized") {
			t.Fatalf("err = %v, want unauthorized", err)
		}
	})

	t.Run("a tenant's template named like an image cache is never taken for the image", func(t *testing.T) {
		digest, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		squat := t.TempDir()
		if err := os.WriteFile(filepath.Join(squat, "squatted"), []byte("another team's files"), 0o755); err != nil {
			t.Fatal(err)
		}
		if _, err := store.Import(ctx, "image-"+digest.Hex[:20], squat, nil); err != nil {
			t.Fatal(err)
		}
		got, err := store.EnsureImage(ctx, ref, creds, allow, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(got.Rootfs, "squatted")); err == nil {
			t.Fatalf("the pull of %s gave the squatter's template %s", ref, got.Name)
		}
		if _, err := os.Stat(filepath.Join(got.Rootfs, "usr/local/bin/hello")); err != nil {
			t.Fatalf("the image's files: %v", err)
		}
		if _, err := store.Get(got.Name); err == nil {
			t.Fatalf("the image cache %s is found by name; it is the store's own", got.Name)
		}
	})

	var root *template.Template
	t.Run("a pulled image becomes a root template with its config", func(t *testing.T) {
		root, err = store.EnsureImage(ctx, ref, creds, allow, nil)
		if err != nil {
			t.Fatal(err)
		}
		if root.Env["FROM_IMAGE"] != "yes" || root.Workdir != "/tmp" || !strings.Contains(root.Image, ref+"@sha256:") {
			t.Fatalf("template = %+v", root)
		}
		again, err := store.EnsureImage(ctx, ref, creds, allow, nil)
		if err != nil || again.Name != root.Name || !again.CreatedAt.Equal(root.CreatedAt) {
			t.Fatalf("second pull made %+v, %v; want the same template", again, err)
		}
	})

	t.Run("steps build on the image and a sandbox runs it", func(t *testing.T) {
		if root == nil {
			t.Skip("no image template")
		}
		tpl, err := store.Build(ctx, build.Spec{Name: "on-image", From: root.Name, Steps: []template.Step{
			{Kind: template.StepRun, Args: []string{"hello > out.txt && echo $FROM_IMAGE >> out.txt"}},
		}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		out := runOn(t, rt, "img", runtime.Spec{Rootfs: tpl.Rootfs, Layers: tpl.LayerDirs, Args: []string{"/bin/cat", "/tmp/out.txt"}})
		if out != "hello from the image\nyes\n" {
			t.Fatalf("out.txt = %q", out)
		}
	})

	t.Run("a docker save archive imports as a template", func(t *testing.T) {
		loaded, err := oci.Load(ocitest.Save(t, "cove/busybox:saved", img))
		if err != nil {
			t.Fatal(err)
		}
		tpl, err := store.ImportImage(ctx, "saved", loaded, "cove/busybox:saved", nil)
		if err != nil {
			t.Fatal(err)
		}
		if b, err := readTemplateFile(tpl, "usr/local/bin/hello"); err != nil || !strings.Contains(string(b), "hello from the image") {
			t.Fatalf("hello = %q, %v", b, err)
		}
		if _, err := store.ImportImage(ctx, "saved", loaded, "again", nil); !errors.Is(err, template.ErrExists) {
			t.Fatalf("second import under one name: %v", err)
		}
	})
}
