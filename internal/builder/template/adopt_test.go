package template_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/cove-dev/cove/internal/builder/template"
	"github.com/cove-dev/cove/internal/store"
)

// A data dir as the release before left it: each template's record its tree's meta.json,
// each tag a directory <name>@<tag>/meta.json, each layer's record .layers/<key>/meta.json,
// and no template records in the SQLite file. Its first open moves every record into the
// store; from then on the records are the authority (the manifests stay as they were).
func TestOpenAdoptsTheTemplatesTagsAndLayersOfTheReleaseBefore(t *testing.T) {
	ctx := context.Background()
	write := func(p, body string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	data := t.TempDir()
	dir := filepath.Join(data, "templates")
	write(filepath.Join(dir, "busybox", "meta.json"), `{"name":"busybox","created_at":"2026-01-02T03:04:05Z","build_seconds":1,"size_bytes":1}`)
	write(filepath.Join(dir, "busybox", "rootfs", "etc", "hostname"), "root\n")
	write(filepath.Join(dir, ".layers", "k1", "meta.json"), `{"key":"k1","parent":"root:busybox","step":"RUN echo one","size_bytes":4096,"created_at":"2026-01-02T03:04:05Z","build_seconds":1}`)
	write(filepath.Join(dir, ".layers", "k1", "diff", "one"), "1\n")
	write(filepath.Join(dir, ".layers", "k2", "meta.json"), `{"key":"k2","parent":"k1","step":"RUN echo two","size_bytes":8192,"created_at":"2026-01-03T03:04:05Z","build_seconds":1}`)
	write(filepath.Join(dir, ".layers", "k2", "diff", "two"), "2\n")
	write(filepath.Join(dir, "app", "meta.json"), `{"name":"app","from":"busybox","root":"busybox","layers":["k1","k2"],"created_at":"2026-01-03T03:04:05Z",`+
		`"build_seconds":1,"size_bytes":4,"build_id":"b2","team_id":"team-1","public":true}`)
	write(filepath.Join(dir, "app", "build.log"), "==> ready\n")
	write(filepath.Join(dir, "app@v1", "meta.json"), `{"name":"app","from":"busybox","root":"busybox","layers":["k1"],"created_at":"2026-01-02T04:00:00Z",`+
		`"build_seconds":1,"size_bytes":4,"build_id":"b1","team_id":"team-1"}`)
	appManifest, _ := os.ReadFile(filepath.Join(dir, "app", "meta.json"))

	ts, err := template.OpenData(t, data)
	if err != nil {
		t.Fatal(err)
	}
	records := template.TestRecords(t, data)
	t.Run("every template, tag and layer has its record in the store", func(t *testing.T) {
		for _, ref := range [][2]string{{"busybox", ""}, {"app", ""}, {"app", "v1"}} {
			if _, err := records.GetTemplate(ctx, ref[0], ref[1]); err != nil {
				t.Errorf("record of %s:%s: %v", ref[0], ref[1], err)
			}
		}
		for _, k := range []string{"k1", "k2"} {
			if _, err := records.GetTemplateLayer(ctx, k); err != nil {
				t.Errorf("record of layer %s: %v", k, err)
			}
		}
	})
	t.Run("the templates read as they were, team and public setting included", func(t *testing.T) {
		app, err := ts.Get("app")
		if err != nil {
			t.Fatal(err)
		}
		if app.TeamID != "team-1" || !app.Public || app.BuildID != "b2" || len(app.LayerDirs) != 2 || app.Rootfs != filepath.Join(dir, "busybox", "rootfs") {
			t.Fatalf("app: %+v", app)
		}
		if app.LayerDirs[0] != filepath.Join(dir, ".layers", "k2", "diff") {
			t.Fatalf("app's top layer: %v", app.LayerDirs)
		}
		v1, err := ts.Get("app:v1")
		if err != nil {
			t.Fatal(err)
		}
		if v1.BuildID != "b1" || len(v1.LayerDirs) != 1 {
			t.Fatalf("app:v1: %+v", v1)
		}
		tags, err := ts.Tags("app")
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, tg := range tags {
			names = append(names, tg.Tag+"="+tg.BuildID)
		}
		if !reflect.DeepEqual(names, []string{"default=b2", "v1=b1"}) {
			t.Fatalf("tags: %v", names)
		}
		all, err := ts.List()
		if err != nil || len(all) != 2 || all[0].Name != "app" || all[1].Name != "busybox" {
			t.Fatalf("List = %v, %v", all, err)
		}
		usage, err := ts.Usage()
		if err != nil || usage["app"].Own != 4096+8192 {
			t.Fatalf("app's usage (from its layers' records): %+v, %v", usage["app"], err)
		}
	})
	t.Run("a tag's directory goes once its record is made", func(t *testing.T) {
		if _, err := os.Stat(filepath.Join(dir, "app@v1")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("app@v1: %v", err)
		}
	})
	t.Run("a setting changes the record, never the tree's manifest, and outlives the next open", func(t *testing.T) {
		if err := ts.SetPublic("app", false); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(filepath.Join(dir, "app", "meta.json")); string(b) != string(appManifest) {
			t.Fatalf("the manifest was rewritten: %s", b)
		}
		again, err := template.OpenData(t, data)
		if err != nil {
			t.Fatal(err)
		}
		if app, err := again.Get("app"); err != nil || app.Public {
			t.Fatalf("app after another open: %+v, %v; want it private", app, err)
		}
	})
	t.Run("a new tag is a record, no directory", func(t *testing.T) {
		if _, err := ts.SetTag("app:v1", "prod"); err != nil {
			t.Fatal(err)
		}
		if prod, err := ts.Get("app:prod"); err != nil || prod.BuildID != "b1" {
			t.Fatalf("app:prod: %+v, %v", prod, err)
		}
		if _, err := records.GetTemplate(ctx, "app", "prod"); err != nil {
			t.Fatalf("app:prod's record: %v", err)
		}
		if dirs, _ := filepath.Glob(filepath.Join(dir, "*@*")); len(dirs) != 0 {
			t.Fatalf("tag directories: %v", dirs)
		}
	})
	t.Run("a crash between a tag's record and its directory's removal is finished by the next open", func(t *testing.T) {
		write(filepath.Join(dir, "app@v1", "meta.json"), `{"name":"app","root":"busybox","layers":["k2"],"created_at":"2026-01-05T00:00:00Z","build_id":"stale"}`)
		again, err := template.OpenData(t, data)
		if err != nil {
			t.Fatal(err)
		}
		if v1, err := again.Get("app:v1"); err != nil || v1.BuildID != "b1" {
			t.Fatalf("app:v1: %+v, %v; want the record's build b1", v1, err)
		}
		if _, err := os.Stat(filepath.Join(dir, "app@v1")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("app@v1: %v", err)
		}
	})
	t.Run("a tree without a record is adopted when it is looked up", func(t *testing.T) {
		// As a crash between a build's rename and its record's write leaves it, or as
		// `cove template build --templates DIR` of a server with another database makes it.
		write(filepath.Join(dir, "late", "meta.json"), `{"name":"late","root":"busybox","layers":["k1"],"created_at":"2026-01-06T00:00:00Z","team_id":"team-2"}`)
		late, err := ts.Get("late")
		if err != nil || late.TeamID != "team-2" {
			t.Fatalf("late: %+v, %v", late, err)
		}
		if _, err := records.GetTemplate(ctx, "late", ""); err != nil {
			t.Fatalf("late's record: %v", err)
		}
	})
	t.Run("a removed template stays removed, tags and all", func(t *testing.T) {
		for _, name := range []string{"late", "app"} {
			if err := ts.Remove(name); err != nil {
				t.Fatal(err)
			}
		}
		again, err := template.OpenData(t, data)
		if err != nil {
			t.Fatal(err)
		}
		for _, ref := range []string{"app", "app:v1", "late"} {
			if _, err := again.Get(ref); !errors.Is(err, template.ErrNotFound) {
				t.Errorf("%s after its removal: %v", ref, err)
			}
		}
		if _, err := records.GetTemplate(ctx, "app", "v1"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("app:v1's record: %v", err)
		}
		for _, k := range []string{"k1", "k2"} {
			if _, err := records.GetTemplateLayer(ctx, k); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("layer %s, which nothing uses now: %v", k, err)
			}
			if _, err := os.Stat(filepath.Join(dir, ".layers", k)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("layer %s's files: %v", k, err)
			}
		}
	})
}
