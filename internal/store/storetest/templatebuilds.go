package storetest

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/store"
)

func templateBuilds(t *testing.T, s Engine) {
	ctx := context.Background()
	done := base.Add(time.Minute)
	first := &store.TemplateBuild{ID: "b1", Template: "web", TeamID: "team", Status: "waiting", CreatedAt: base, Record: []byte(`{"id":"b1"}`)}
	second := &store.TemplateBuild{ID: "b2", Template: "api", TeamID: "team", Status: "ready", CreatedAt: base.Add(time.Second), FinishedAt: &done, Record: []byte(`{"id":"b2"}`)}
	third := &store.TemplateBuild{ID: "b3", Template: "web", Status: "error", CreatedAt: base.Add(2 * time.Second), FinishedAt: &done, Record: []byte(`{"id":"b3"}`)}
	for _, b := range []*store.TemplateBuild{third, first, second} {
		if err := s.PutTemplateBuild(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	ids := func(bs []*store.TemplateBuild) []string {
		var out []string
		for _, b := range bs {
			out = append(out, b.ID)
		}
		return out
	}

	t.Run("a build reads back as it was put", func(t *testing.T) {
		got := must[*store.TemplateBuild](t)(s.GetTemplateBuild(ctx, "b2"))
		if !reflect.DeepEqual(got, second) {
			t.Fatalf("got %+v, put %+v", got, second)
		}
	})
	t.Run("an unknown build is not found", func(t *testing.T) {
		if _, err := s.GetTemplateBuild(ctx, "absent"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("get: %v", err)
		}
		if err := s.DeleteTemplateBuild(ctx, "absent"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("delete: %v", err)
		}
	})
	t.Run("a build without an id or template is refused", func(t *testing.T) {
		if err := s.PutTemplateBuild(ctx, &store.TemplateBuild{ID: "b9", CreatedAt: base, Record: []byte(`{}`)}); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("put: %v", err)
		}
	})
	t.Run("listings are oldest first, of one template or all", func(t *testing.T) {
		if got := ids(must[[]*store.TemplateBuild](t)(s.ListTemplateBuilds(ctx, ""))); !reflect.DeepEqual(got, []string{"b1", "b2", "b3"}) {
			t.Fatalf("all: %v", got)
		}
		if got := ids(must[[]*store.TemplateBuild](t)(s.ListTemplateBuilds(ctx, "web"))); !reflect.DeepEqual(got, []string{"b1", "b3"}) {
			t.Fatalf("web: %v", got)
		}
		if got := must[[]*store.TemplateBuild](t)(s.ListTemplateBuilds(ctx, "none")); len(got) != 0 {
			t.Fatalf("none: %v", got)
		}
	})
	t.Run("a put replaces the record with its id", func(t *testing.T) {
		upd := *first
		upd.Status, upd.FinishedAt, upd.Record = "ready", &done, []byte(`{"id":"b1","status":"ready"}`)
		if err := s.PutTemplateBuild(ctx, &upd); err != nil {
			t.Fatal(err)
		}
		got := must[*store.TemplateBuild](t)(s.GetTemplateBuild(ctx, "b1"))
		if !reflect.DeepEqual(got, &upd) || got.Unfinished() {
			t.Fatalf("got %+v, put %+v", got, &upd)
		}
	})

	lines := []store.BuildLogLine{
		{Seq: 0, Time: base, Level: "info", Step: "base", Message: "==> steps run in a sandbox"},
		{Seq: 1, Time: base.Add(time.Millisecond), Level: "info", Step: "1", Message: "hello"},
		{Seq: 2, Time: base.Add(2 * time.Millisecond), Level: "error", Step: "1", Message: "exit 1"},
	}
	t.Run("a build's log reads back in order, from an offset", func(t *testing.T) {
		if err := s.AppendBuildLog(ctx, "b3", lines[:2]); err != nil {
			t.Fatal(err)
		}
		if err := s.AppendBuildLog(ctx, "b3", lines[2:]); err != nil {
			t.Fatal(err)
		}
		if got := must[[]store.BuildLogLine](t)(s.BuildLog(ctx, "b3", 0, 0)); !reflect.DeepEqual(got, lines) {
			t.Fatalf("all: %+v", got)
		}
		if got := must[[]store.BuildLogLine](t)(s.BuildLog(ctx, "b3", 1, 1)); !reflect.DeepEqual(got, lines[1:2]) {
			t.Fatalf("offset 1, limit 1: %+v", got)
		}
		if got := must[[]store.BuildLogLine](t)(s.BuildLog(ctx, "b3", 5, 0)); got == nil || len(got) != 0 {
			t.Fatalf("past the end: %#v", got)
		}
		if n := must[int](t)(s.BuildLogLen(ctx, "b3")); n != 3 {
			t.Fatalf("length %d", n)
		}
		if got := must[[]store.BuildLogLine](t)(s.BuildLog(ctx, "b1", 0, 0)); len(got) != 0 {
			t.Fatalf("another build's log: %+v", got)
		}
	})
	t.Run("a line written twice is a conflict, and the batch is not kept", func(t *testing.T) {
		again := []store.BuildLogLine{{Seq: 3, Time: base, Level: "info", Message: "new"}, lines[0]}
		if err := s.AppendBuildLog(ctx, "b3", again); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("append: %v", err)
		}
		if n := must[int](t)(s.BuildLogLen(ctx, "b3")); n != 3 {
			t.Fatalf("length %d after a refused batch", n)
		}
	})
	t.Run("a log of no build is refused", func(t *testing.T) {
		if err := s.AppendBuildLog(ctx, "absent", lines[:1]); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("append: %v", err)
		}
	})
	t.Run("a deleted build takes its log with it", func(t *testing.T) {
		if err := s.DeleteTemplateBuild(ctx, "b3"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.GetTemplateBuild(ctx, "b3"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("get after delete: %v", err)
		}
		if n := must[int](t)(s.BuildLogLen(ctx, "b3")); n != 0 {
			t.Fatalf("%d lines left", n)
		}
		// The id is free again: a build put anew starts an empty log.
		if err := s.PutTemplateBuild(ctx, third); err != nil {
			t.Fatal(err)
		}
		if n := must[int](t)(s.BuildLogLen(ctx, "b3")); n != 0 {
			t.Fatalf("%d lines in a new build's log", n)
		}
	})
}
