package template_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/template"
)

// TestBuildFilesArePruned bounds the build records and uploads as retention does: by age
// and by count, oldest first, never a record still building nor an upload a build reads.
func TestBuildFilesArePruned(t *testing.T) {
	_, store := busyboxStore(t)
	ctx := context.Background()
	data := t.TempDir()
	builds, err := template.OpenBuilds(store, data)
	if err != nil {
		t.Fatal(err)
	}
	future := time.Now().Add(time.Hour)
	kept := func(t *testing.T, f template.Files) int64 {
		t.Helper()
		k, err := f.Kept()
		if err != nil {
			t.Fatal(err)
		}
		return k.Count
	}

	t.Run("records of builds not yet finished are counted and kept", func(t *testing.T) {
		for i := range 3 {
			if _, err := builds.Request(fmt.Sprintf("rec-%d", i), nil, 0, 0, "", "team-1"); err != nil {
				t.Fatal(err)
			}
		}
		if n, err := builds.Records().PruneBefore(future, 100); err != nil || n != 0 || kept(t, builds.Records()) != 3 {
			t.Fatalf("pruned %d (%v) of 3 waiting records", n, err)
		}
	})
	t.Run("finished records go past the cap, oldest first, then past the TTL", func(t *testing.T) {
		// A new process fails the waiting builds (orphaned): now they are finished.
		if builds, err = template.OpenBuilds(store, data); err != nil {
			t.Fatal(err)
		}
		if n, err := builds.Records().PruneOverCap(1, 100); err != nil || n != 2 || kept(t, builds.Records()) != 1 {
			t.Fatalf("pruned %d (%v) over a cap of 1", n, err)
		}
		if n, err := builds.Records().PruneBefore(time.Now().Add(-time.Hour), 100); err != nil || n != 0 {
			t.Fatalf("pruned %d (%v) records younger than the TTL", n, err)
		}
		if n, err := builds.Records().PruneBefore(future, 100); err != nil || n != 1 || kept(t, builds.Records()) != 0 {
			t.Fatalf("pruned %d (%v) records older than the TTL", n, err)
		}
		if all, _ := builds.List(""); len(all) != 0 {
			t.Fatalf("records left: %+v", all)
		}
	})

	ctxDir := t.TempDir()
	upload := func(t *testing.T, name string) string {
		t.Helper()
		if err := os.WriteFile(filepath.Join(ctxDir, name), []byte(name+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		var tar bytes.Buffer
		hash, err := template.ArchiveContext(ctxDir, name, "/", &tar)
		if err != nil {
			t.Fatal(err)
		}
		if err := builds.Upload("team-1", hash, &tar, 1<<20); err != nil {
			t.Fatal(err)
		}
		return hash
	}
	old, fresh, used := upload(t, "old.txt"), upload(t, "fresh.txt"), upload(t, "used.txt")
	aged := time.Now().Add(-48 * time.Hour)
	for _, h := range []string{old, used} {
		if err := os.Chtimes(filepath.Join(builds.Uploads(), "team-1", h+".tar"), aged, aged); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("an upload a build reads is kept; other old uploads go", func(t *testing.T) {
		rec, err := builds.Request("copier", nil, 0, 0, "", "team-1")
		if err != nil {
			t.Fatal(err)
		}
		err = builds.Start(ctx, rec.ID, "copier", template.BuildRequest{FromTemplate: "busybox", Steps: []template.Step{
			{Kind: template.StepRun, Args: []string{"sleep 1", "root"}},
			{Kind: template.StepCopy, Args: []string{"used.txt", "/used.txt"}, FilesHash: used},
		}})
		if err != nil {
			t.Fatal(err)
		}
		n, err := builds.UploadFiles().PruneBefore(time.Now().Add(-24*time.Hour), 100)
		if err != nil || n != 1 || builds.HasUpload("team-1", old) || !builds.HasUpload("team-1", fresh) || !builds.HasUpload("team-1", used) {
			t.Fatalf("pruned %d (%v); old %v fresh %v used %v", n, err,
				builds.HasUpload("team-1", old), builds.HasUpload("team-1", fresh), builds.HasUpload("team-1", used))
		}
		if done := waitBuild(t, builds, rec.ID); done.Status != template.BuildReady {
			t.Fatalf("the build that read the upload: %+v", done.Reason)
		}
	})
	t.Run("uploads go past the cap, oldest first", func(t *testing.T) {
		var n int64
		deadline := time.Now().Add(time.Minute)
		for kept(t, builds.UploadFiles()) > 1 { // the finished build lets go of its upload just after its record says so
			m, err := builds.UploadFiles().PruneOverCap(1, 100)
			if err != nil {
				t.Fatal(err)
			}
			n += m
			if time.Now().After(deadline) {
				t.Fatalf("still %d uploads over a cap of 1", kept(t, builds.UploadFiles()))
			}
			time.Sleep(10 * time.Millisecond)
		}
		if n != 1 || builds.HasUpload("team-1", used) || !builds.HasUpload("team-1", fresh) {
			t.Fatalf("pruned %d; used %v fresh %v", n, builds.HasUpload("team-1", used), builds.HasUpload("team-1", fresh))
		}
	})
}
