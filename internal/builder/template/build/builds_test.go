package build_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/builder/template"
	"github.com/cove-dev/cove/internal/builder/template/build"
	"github.com/cove-dev/cove/internal/builder/template/build/oci"
	"github.com/cove-dev/cove/internal/errdefs"
)

func TestBuildRecords(t *testing.T) {
	_, store := busyboxStore(t)
	ctx := context.Background()
	data := t.TempDir()
	builds, err := openBuilds(t, store, data)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("a build is a record with its steps, cache hits, logs and request id", func(t *testing.T) {
		rec, err := builds.Request(build.NewBuild{Name: "rec", CPUCount: 1, MemoryMB: 128, RequestID: "req-42", TeamID: "team-1"})
		if err != nil {
			t.Fatal(err)
		}
		steps := []template.Step{{Kind: template.StepRun, Args: []string{"echo from-step > /f", "root"}}}
		if err := builds.Start(ctx, rec.ID, "rec", build.BuildRequest{FromTemplate: "busybox", Steps: steps}); err != nil {
			t.Fatal(err)
		}
		done := waitBuild(t, builds, rec.ID)
		if done.Status != build.BuildReady || done.RequestID != "req-42" || len(done.Steps) != 1 || done.Steps[0].Cached {
			t.Fatalf("record = %+v", done)
		}
		var logs []string
		for _, e := range builds.Logs(rec, 0) {
			logs = append(logs, e.Step+": "+e.Message)
		}
		if !strings.Contains(strings.Join(logs, "\n"), "1: ==> [1/1] RUN (as root) echo from-step") {
			t.Fatalf("logs:\n%s", strings.Join(logs, "\n"))
		}
		if err := builds.Start(ctx, rec.ID, "rec", build.BuildRequest{FromTemplate: "busybox"}); !errors.Is(err, template.ErrExists) {
			t.Fatalf("starting a build twice: %v", err)
		}
	})

	t.Run("bad requests leave the build waiting", func(t *testing.T) {
		rec, _ := builds.Request(build.NewBuild{Name: "rec2", CPUCount: 0, MemoryMB: 0, RequestID: "", TeamID: ""})
		for _, req := range []build.BuildRequest{
			{},
			{FromTemplate: "missing"},
			{FromImage: "127.0.0.1:1/x:1", FromTemplate: "busybox"},
			{FromImage: "Not A Reference!"},
			{FromImage: "127.0.0.1:1/x:1", FromImageRegistry: &build.RegistryAuth{Type: "aws"}},
			{FromTemplate: "busybox", Steps: []template.Step{{Kind: template.StepCopy, Args: []string{"a", "/b"}, FilesHash: strings.Repeat("ab", 32)}}},
		} {
			if err := builds.Start(ctx, rec.ID, "rec2", req); !errors.Is(err, template.ErrInvalid) {
				t.Errorf("%+v: %v, want ErrInvalid", req, err)
			}
		}
		if got, _ := builds.Get(rec.ID); got.Status != build.BuildWaiting {
			t.Fatalf("status = %s", got.Status)
		}
		if _, err := builds.Request(build.NewBuild{Name: "base", CPUCount: 0, MemoryMB: 0, RequestID: "", TeamID: ""}); !errors.Is(err, template.ErrInvalid) {
			t.Fatalf("a build of base: %v", err)
		}
	})

	t.Run("a fromImage on an address a pull may not reach is refused before the build starts", func(t *testing.T) {
		rec, _ := builds.Request(build.NewBuild{Name: "ssrf", CPUCount: 0, MemoryMB: 0, RequestID: "", TeamID: "team-1"})
		for _, ref := range []string{"127.0.0.1:3000/x:1", "169.254.169.254/x:1", "localhost:3000/x:1"} {
			err := builds.Start(ctx, rec.ID, "ssrf", build.BuildRequest{FromImage: ref})
			if !errors.Is(err, oci.ErrRefused) || !strings.Contains(err.Error(), "registry "+strings.Split(strings.Split(ref, "/")[0], ":")[0]) {
				t.Errorf("fromImage %s: %v, want ErrRefused naming the registry", ref, err)
			}
			if code := errdefs.Status(err); code != http.StatusForbidden {
				t.Errorf("fromImage %s answers %d, want 403", ref, code)
			}
		}
		if got, _ := builds.Get(rec.ID); got.Status != build.BuildWaiting {
			t.Fatalf("status = %s", got.Status)
		}
	})

	t.Run("a build a crash interrupted is failed as orphaned at the next open", func(t *testing.T) {
		rec, _ := builds.Request(build.NewBuild{Name: "crashed", CPUCount: 0, MemoryMB: 0, RequestID: "", TeamID: ""})
		again, err := openBuilds(t, store, data) // as the next server start would
		if err != nil {
			t.Fatal(err)
		}
		got, err := again.Get(rec.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != build.BuildError || got.Reason == nil || got.Reason.Code != build.ReasonOrphaned {
			t.Fatalf("record = %+v", got)
		}
		if _, err := store.Get("crashed"); !errors.Is(err, template.ErrNotFound) {
			t.Fatalf("a template of the orphaned build: %v", err)
		}
	})
}

func waitBuild(t *testing.T, b *build.Builds, id string) *build.BuildRecord {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		rec, err := b.Get(id)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Status == build.BuildReady || rec.Status == build.BuildError {
			return rec
		}
		if time.Now().After(deadline) {
			t.Fatalf("build %s still %s after 2 min", id, rec.Status)
		}
		time.Sleep(20 * time.Millisecond) // polling a record on disk, as a client does
	}
}
