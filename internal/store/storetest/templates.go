package storetest

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/store"
)

func templates(t *testing.T, s Engine) {
	ctx := context.Background()
	web := &store.TemplateRecord{Name: "web", TeamID: "team", BuildID: "b1", CreatedAt: base, Record: []byte(`{"name":"web"}`)}
	api := &store.TemplateRecord{Name: "api", CreatedAt: base.Add(time.Second), Record: []byte(`{"name":"api"}`)}
	v1 := &store.TemplateRecord{Name: "web", Tag: "v1", TeamID: "team", BuildID: "b1", CreatedAt: base.Add(2 * time.Second), Record: []byte(`{"name":"web","tag":"v1"}`)}
	prod := &store.TemplateRecord{Name: "web", Tag: "prod", TeamID: "team", BuildID: "b1", CreatedAt: base.Add(3 * time.Second), Record: []byte(`{"name":"web"}`)}
	for _, r := range []*store.TemplateRecord{web, api, v1, prod} {
		if err := s.PutTemplate(ctx, r, false); err != nil {
			t.Fatal(err)
		}
	}
	names := func(rs []*store.TemplateRecord) []string {
		var out []string
		for _, r := range rs {
			out = append(out, templateName(r))
		}
		return out
	}

	t.Run("a template and a tag read back as they were put", func(t *testing.T) {
		if got := must[*store.TemplateRecord](t)(s.GetTemplate(ctx, "web", "")); !reflect.DeepEqual(got, web) {
			t.Fatalf("web: %+v", got)
		}
		if got := must[*store.TemplateRecord](t)(s.GetTemplate(ctx, "web", "v1")); !reflect.DeepEqual(got, v1) {
			t.Fatalf("web:v1: %+v", got)
		}
		if _, err := s.GetTemplate(ctx, "web", "absent"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("an absent tag: %v", err)
		}
		if _, err := s.GetTemplate(ctx, "absent", ""); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("an absent template: %v", err)
		}
	})
	t.Run("listings hold the names by name and a name's tags by tag", func(t *testing.T) {
		if got := names(must[[]*store.TemplateRecord](t)(s.ListTemplates(ctx))); !reflect.DeepEqual(got, []string{"api", "web"}) {
			t.Fatalf("templates: %v", got)
		}
		if got := names(must[[]*store.TemplateRecord](t)(s.ListTemplateTags(ctx, "web"))); !reflect.DeepEqual(got, []string{"web:prod", "web:v1"}) {
			t.Fatalf("tags of web: %v", got)
		}
		if got := must[[]*store.TemplateRecord](t)(s.ListTemplateTags(ctx, "api")); len(got) != 0 {
			t.Fatalf("tags of api: %v", names(got))
		}
	})
	t.Run("a put over a record is a conflict unless it replaces", func(t *testing.T) {
		rebuilt := *web
		rebuilt.BuildID, rebuilt.CreatedAt, rebuilt.Record = "b2", base.Add(time.Hour), []byte(`{"name":"web","build":"b2"}`)
		if err := s.PutTemplate(ctx, &rebuilt, false); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("put without replace: %v", err)
		}
		if got := must[*store.TemplateRecord](t)(s.GetTemplate(ctx, "web", "")); got.BuildID != "b1" {
			t.Fatalf("a refused put changed the record: %+v", got)
		}
		if err := s.PutTemplate(ctx, &rebuilt, true); err != nil {
			t.Fatal(err)
		}
		if got := must[*store.TemplateRecord](t)(s.GetTemplate(ctx, "web", "")); !reflect.DeepEqual(got, &rebuilt) {
			t.Fatalf("replaced: %+v", got)
		}
		if got := must[*store.TemplateRecord](t)(s.GetTemplate(ctx, "web", "v1")); got.BuildID != "b1" {
			t.Fatalf("a rebuild moved the tag: %+v", got)
		}
	})
	t.Run("a record without a name is refused", func(t *testing.T) {
		if err := s.PutTemplate(ctx, &store.TemplateRecord{CreatedAt: base, Record: []byte(`{}`)}, true); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("put: %v", err)
		}
	})
	t.Run("a tag goes alone, and a template with every tag it has", func(t *testing.T) {
		if err := s.DeleteTemplateTag(ctx, "web", "v1"); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteTemplateTag(ctx, "web", "v1"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("a tag deleted twice: %v", err)
		}
		if _, err := s.GetTemplate(ctx, "web", ""); err != nil {
			t.Fatalf("the template after its tag went: %v", err)
		}
		if err := s.DeleteTemplate(ctx, "web"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.GetTemplate(ctx, "web", "prod"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("a tag of a deleted template: %v", err)
		}
		if err := s.DeleteTemplate(ctx, "web"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("a template deleted twice: %v", err)
		}
		if got := names(must[[]*store.TemplateRecord](t)(s.ListTemplates(ctx))); !reflect.DeepEqual(got, []string{"api"}) {
			t.Fatalf("templates left: %v", got)
		}
	})

	lower := &store.TemplateLayer{Key: "aaaa", CreatedAt: base, Record: []byte(`{"key":"aaaa"}`)}
	upper := &store.TemplateLayer{Key: "bbbb", CreatedAt: base.Add(time.Second), Record: []byte(`{"key":"bbbb","parent":"aaaa"}`)}
	t.Run("layers read back by key, and a key is made once", func(t *testing.T) {
		for _, l := range []*store.TemplateLayer{upper, lower} {
			if err := s.PutTemplateLayer(ctx, l); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.PutTemplateLayer(ctx, &store.TemplateLayer{Key: "aaaa", CreatedAt: base, Record: []byte(`{}`)}); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("a key put twice: %v", err)
		}
		if got := must[*store.TemplateLayer](t)(s.GetTemplateLayer(ctx, "bbbb")); !reflect.DeepEqual(got, upper) {
			t.Fatalf("layer: %+v", got)
		}
		all := must[[]*store.TemplateLayer](t)(s.ListTemplateLayers(ctx))
		if len(all) != 2 || !reflect.DeepEqual(all[0], lower) || !reflect.DeepEqual(all[1], upper) {
			t.Fatalf("layers: %+v", all)
		}
		if err := s.PutTemplateLayer(ctx, &store.TemplateLayer{CreatedAt: base}); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("a layer without a key: %v", err)
		}
	})
	t.Run("a deleted layer is gone", func(t *testing.T) {
		if err := s.DeleteTemplateLayer(ctx, "aaaa"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.GetTemplateLayer(ctx, "aaaa"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("get: %v", err)
		}
		if err := s.DeleteTemplateLayer(ctx, "aaaa"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("delete twice: %v", err)
		}
	})
}

func templateName(r *store.TemplateRecord) string {
	if r.Tag == "" {
		return r.Name
	}
	return r.Name + ":" + r.Tag
}
