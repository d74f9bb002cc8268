package restart

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/covetest"
	cove "github.com/cove-dev/cove/sdk"
)

// TestVolumesAcrossACrash drives volumes through the Go SDK, crashes the server and starts
// it again: the volume's size, files and mounts outlive the server, so its one read-write
// mount is still held by the adopted sandbox, and a delete still sees it.
func TestVolumesAcrossACrash(t *testing.T) {
	covetest.Skip(t)
	s := covetest.StartWith(t, "", covetest.Options{OnStop: "keep", Args: []string{"--network=false"}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := cove.NewClient(cove.Config{APIURL: s.URL, APIKey: s.Key, RestartWait: 30 * time.Second})
	vol, err := c.CreateVolumeWith(ctx, "crash-vol", cove.VolumeOptions{SizeMB: 16})
	if err != nil {
		t.Fatal(err)
	}
	if vol.SizeBytes != 16<<20 || vol.Token == "" {
		t.Fatalf("created %+v", vol)
	}
	files := c.VolumeFiles(vol.ID)
	if _, err := files.Write(ctx, "/seed/a.txt", strings.NewReader("seed"), cove.VolumeWriteOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	writer, err := c.Create(ctx, cove.SandboxOptions{Timeout: 5 * time.Minute, VolumeMounts: []cove.VolumeMount{{Name: vol.Name, Path: "/mnt/v"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Kill(context.Background(), writer.ID) }) // c: the client of the server running then
	reader, err := c.Create(ctx, cove.SandboxOptions{Timeout: 5 * time.Minute, VolumeMounts: []cove.VolumeMount{{Name: vol.Name, Path: "/mnt/v", ReadOnly: true}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Kill(context.Background(), reader.ID) })

	t.Run("a read-only mount gets EROFS and sees the writer's files", func(t *testing.T) {
		if _, err := writer.Commands.Run(ctx, "echo w > /mnt/v/w"); err != nil {
			t.Fatal(err)
		}
		res, err := reader.Commands.Run(ctx, "cat /mnt/v/w /mnt/v/seed/a.txt; echo no 2>&1 > /mnt/v/r; echo exit=$?")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(res.Stdout, "w\nseed") || !strings.Contains(res.Stdout+res.Stderr, "Read-only file system") || strings.Contains(res.Stdout, "exit=0") {
			t.Errorf("reader: stdout %q stderr %q", res.Stdout, res.Stderr)
		}
	})
	t.Run("an upload past the size is ErrNoSpace", func(t *testing.T) {
		_, err := files.Write(ctx, "/big", bytes.NewReader(make([]byte, 20<<20)), cove.VolumeWriteOptions{})
		if !errors.Is(err, cove.ErrNoSpace) {
			t.Errorf("20 MiB into 16: %v", err)
		}
	})

	s.Crash()
	s.Restart()
	// The new server listens on another port: the same key and sandboxes, a new client.
	c = cove.NewClient(cove.Config{APIURL: s.URL, APIKey: s.Key})
	files = c.VolumeFiles(vol.ID)
	if writer, err = c.Connect(ctx, writer.ID, 5*time.Minute); err != nil {
		t.Fatal(err)
	}

	t.Run("after the crash the adopted writer still holds the one read-write mount", func(t *testing.T) {
		_, err := c.Create(ctx, cove.SandboxOptions{Timeout: time.Minute, VolumeMounts: []cove.VolumeMount{{Name: vol.Name, Path: "/data"}}})
		if !errors.Is(err, cove.ErrConflict) || !strings.Contains(err.Error(), vol.Name) || !strings.Contains(err.Error(), writer.ID) {
			t.Errorf("a second read-write mount after the crash: %v", err)
		}
		if err := c.DeleteVolume(ctx, vol.ID); !errors.Is(err, cove.ErrConflict) {
			t.Errorf("delete of a mounted volume after the crash: %v", err)
		}
	})
	t.Run("the reader's info still names its read-only mount", func(t *testing.T) {
		info, err := c.Info(ctx, reader.ID)
		if err != nil || len(info.VolumeMounts) != 1 || info.VolumeMounts[0] != (cove.VolumeMount{Name: vol.Name, Path: "/mnt/v", ReadOnly: true}) {
			t.Errorf("reader's info: %+v %v", info, err)
		}
	})
	t.Run("its files, size and usage are still there, for the content API and the sandboxes", func(t *testing.T) {
		if b, err := files.Read(ctx, "/w"); err != nil || string(b) != "w\n" {
			t.Errorf("read /w: %q %v", b, err)
		}
		got, err := c.GetVolume(ctx, vol.Name)
		if err != nil || got.SizeBytes != 16<<20 || got.UsedBytes <= 0 {
			t.Errorf("volume after the crash: %+v %v", got, err)
		}
		if _, err := writer.Commands.Run(ctx, "echo after > /mnt/v/after"); err != nil {
			t.Errorf("the writer after the crash: %v", err)
		}
		if b, err := files.Read(ctx, "/after"); err != nil || string(b) != "after\n" {
			t.Errorf("read /after: %q %v", b, err)
		}
	})
	t.Run("once its sandboxes are gone the volume is deleted and unmounted", func(t *testing.T) {
		for _, id := range []string{writer.ID, reader.ID} {
			if err := c.Kill(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.DeleteVolume(ctx, vol.ID); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile("/proc/self/mountinfo"); bytes.Contains(b, []byte(vol.ID)) {
			t.Errorf("a mount of %s is left", vol.ID)
		}
	})
	t.Run("a stop unmounts the volumes no sandbox holds and keeps the held ones for the sandboxes that outlive it", func(t *testing.T) {
		idle, err := c.CreateVolumeWith(ctx, "idle-vol", cove.VolumeOptions{SizeMB: 8})
		if err != nil {
			t.Fatal(err)
		}
		held, err := c.CreateVolumeWith(ctx, "held-vol", cove.VolumeOptions{SizeMB: 8})
		if err != nil {
			t.Fatal(err)
		}
		holder, err := c.Create(ctx, cove.SandboxOptions{Timeout: 5 * time.Minute, VolumeMounts: []cove.VolumeMount{{Name: held.Name, Path: "/mnt/h"}}})
		if err != nil {
			t.Fatal(err)
		}
		mounted := func(id string) bool {
			b, _ := os.ReadFile("/proc/self/mountinfo")
			return bytes.Contains(b, []byte(id+"/data"))
		}
		if !mounted(idle.ID) || !mounted(held.ID) {
			t.Fatalf("before the stop: idle mounted %v, held mounted %v", mounted(idle.ID), mounted(held.ID))
		}
		s.Stop() // OnStop keep: the holder runs on
		if mounted(idle.ID) || !mounted(held.ID) {
			t.Errorf("after the stop: idle mounted %v (want false), held mounted %v (want true)", mounted(idle.ID), mounted(held.ID))
		}
		s.Restart()
		c = cove.NewClient(cove.Config{APIURL: s.URL, APIKey: s.Key})
		if err := c.Kill(ctx, holder.ID); err != nil {
			t.Fatal(err)
		}
		for _, v := range []string{idle.ID, held.ID} {
			if err := c.DeleteVolume(ctx, v); err != nil {
				t.Error(err)
			}
		}
	})
}
