package build_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/internal/builder/template"
	"github.com/cove-dev/cove/internal/builder/template/build"
)

// TestBuildFilesArePruned bounds the build records and uploads as retention does: by age
// and by count, oldest first, never a record still building nor an upload a build reads.
func TestBuildFilesArePruned(t *testing.T) {
	_, store := busyboxStore(t)
	ctx := context.Background()
	data := t.TempDir()
	top := t // the builds a subtest opens again outlive it
	builds, err := openBuilds(t, store, data)
	if err != nil {
		t.Fatal(err)
	}
	future := time.Now().Add(time.Hour)
	kept := func(t *testing.T, f build.Files) int64 {
		t.Helper()
		k, err := f.Kept()
		if err != nil {
			t.Fatal(err)
		}
		return k.Count
	}

	t.Run("records of builds not yet finished are counted and kept", func(t *testing.T) {
		for i := range 3 {
			if _, err := builds.Request(build.NewBuild{Name: fmt.Sprintf("rec-%d", i), CPUCount: 0, MemoryMB: 0, RequestID: "", TeamID: "team-1"}); err != nil {
				t.Fatal(err)
			}
		}
		if n, err := builds.Records().PruneBefore(future, 100); err != nil || n != 0 || kept(t, builds.Records()) != 3 {
			t.Fatalf("pruned %d (%v) of 3 waiting records", n, err)
		}
	})
	t.Run("finished records go past the cap, oldest first, then past the TTL", func(t *testing.T) {
		// A new process fails the waiting builds (orphaned): now they are finished.
		if builds, err = openBuilds(top, store, data); err != nil {
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
		hash, tar := archiveFile(t, ctxDir, name)
		if err := builds.Upload("team-1", hash, tar, 1<<20, nil); err != nil {
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
		rec, err := builds.Request(build.NewBuild{Name: "copier", CPUCount: 0, MemoryMB: 0, RequestID: "", TeamID: "team-1"})
		if err != nil {
			t.Fatal(err)
		}
		err = builds.Start(ctx, rec.ID, "copier", build.BuildRequest{FromTemplate: "busybox", Steps: []template.Step{
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
		if done := waitBuild(t, builds, rec.ID); done.Status != build.BuildReady {
			t.Fatalf("the build that read the upload: %+v", done.Reason)
		}
	})
	t.Run("uploads go past the cap, oldest first", func(t *testing.T) {
		// The build above let go of its upload before its record said it ended: the oldest
		// upload, the one it read, goes now, not the fresh one after it.
		n, err := builds.UploadFiles().PruneOverCap(1, 100)
		if err != nil {
			t.Fatal(err)
		}
		if n != 1 || builds.HasUpload("team-1", used) || !builds.HasUpload("team-1", fresh) {
			t.Fatalf("pruned %d; used %v fresh %v", n, builds.HasUpload("team-1", used), builds.HasUpload("team-1", fresh))
		}
	})
}

// TestHostArchivesArePruned bounds the archives the CLI packs for host builds as the API's
// uploads: old ones go, but never one a host build (of any process) is reading.
func TestHostArchivesArePruned(t *testing.T) {
	_, store := busyboxStore(t)
	builds, err := openBuilds(t, store, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dir, err := store.HostUploads()
	if err != nil {
		t.Fatal(err)
	}
	ctxDir := t.TempDir()
	pack := func(t *testing.T, name string) string {
		t.Helper()
		hash, tar := archiveFile(t, ctxDir, name)
		p := filepath.Join(dir, hash+".tar")
		if err := os.WriteFile(p, tar.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		aged := time.Now().Add(-48 * time.Hour)
		if err := os.Chtimes(p, aged, aged); err != nil {
			t.Fatal(err)
		}
		return p
	}
	old, read := pack(t, "old.txt"), pack(t, "read.txt")
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }
	// A host build copies read.txt, then runs until cancelled.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := store.Build(ctx, build.Spec{Name: "host-copy", From: "busybox", Files: build.DirSource(dir), Steps: []template.Step{
			{Kind: template.StepCopy, Args: []string{"read.txt", "/read.txt"}, FilesHash: strings.TrimSuffix(filepath.Base(read), ".tar")},
			{Kind: template.StepRun, Args: []string{"sleep 600", "root"}},
		}}, nil)
		done <- err
	}()
	held := func() bool { // the build's shared lock on the archive
		f, err := os.Open(read)
		if err != nil {
			return false
		}
		defer f.Close()
		return unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil
	}
	for deadline := time.Now().Add(time.Minute); !held(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the host build never took its archive")
		}
	}
	t.Run("an old archive a host build reads is kept; other old archives go", func(t *testing.T) {
		n, err := builds.UploadFiles().PruneBefore(time.Now().Add(-24*time.Hour), 100)
		if err != nil || n != 1 || exists(old) || !exists(read) {
			t.Fatalf("pruned %d (%v); old %v read %v", n, err, exists(old), exists(read))
		}
	})
	t.Run("the archive goes once the build is over", func(t *testing.T) {
		cancel()
		if err := <-done; err == nil {
			t.Fatal("the cancelled build succeeded")
		}
		if k, err := builds.UploadFiles().Kept(); err != nil || k.Count != 1 {
			t.Fatalf("kept %+v (%v), want the one archive counted", k, err)
		}
		n, err := builds.UploadFiles().PruneOverCap(0, 100)
		if err != nil || n != 1 || exists(read) {
			t.Fatalf("pruned %d (%v); read %v", n, err, exists(read))
		}
	})
}

// archiveFile writes name (holding its own name) into ctxDir and returns its COPY archive.
func archiveFile(t *testing.T, ctxDir, name string) (hash string, tar *bytes.Buffer) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(ctxDir, name), []byte(name+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tar = new(bytes.Buffer)
	hash, err := build.ArchiveContext(ctxDir, name, "/", tar)
	if err != nil {
		t.Fatal(err)
	}
	return hash, tar
}
