package runtime_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/sandbox/runtime"
)

func TestStopKeepFilesAndReboot(t *testing.T) {
	eachEngine(t, func(t *testing.T, r *runtime.Runc, rootfs string) {
		ctx := context.Background()
		for _, tc := range []struct {
			name string
			disk int64
		}{
			{"a sandbox on the overlay keeps its files and nothing runs until the reboot", 0},
			{"a sandbox with a disk limit keeps its disk and its files", 64 << 20},
		} {
			t.Run(tc.name, func(t *testing.T) {
				spec := runtime.Spec{Rootfs: rootfs, Start: true, Limits: runtime.Limits{DiskBytes: tc.disk}, Args: sh(
					`if [ -f /kept ]; then echo again-$(cat /kept); else echo first > /kept; echo first-boot; fi; sleep 1000 & echo $! > /sleeper; wait`)}
				s := create(t, r, spec)
				s.stdout.waitFor(t, "first-boot", 10*time.Second)
				kept, err := r.StopKeepFiles(ctx, s.id)
				if err != nil {
					t.Fatalf("stop: %v", err)
				}
				if kept.Bytes <= 0 {
					t.Errorf("kept %+v: no bytes", kept)
				}
				if ex := wait(t, r, s.id); !ex.Checkpointed {
					t.Errorf("exit after the stop %+v: want Checkpointed (the sandbox lives on disk)", ex)
				}
				if left := leaks(t, r, s.id, s.sb.Pid); len(left) > 0 {
					t.Errorf("the stopped sandbox still has %s", strings.Join(left, "; "))
				}
				if _, err := r.KeptFiles(s.id); err != nil {
					t.Errorf("kept files: %v", err)
				}
				spec.ID, spec.Reboot = s.id, true
				rsb, err := r.Create(ctx, spec)
				if err != nil {
					t.Fatalf("reboot: %v", err)
				}
				out := collect(rsb.Stdout)
				collect(rsb.Stderr)
				out.waitFor(t, "again-first", 10*time.Second)
				if _, err := r.KeptFiles(s.id); !errors.Is(err, runtime.ErrNoKeptFiles) {
					t.Errorf("kept files of the rebooted sandbox: %v, want ErrNoKeptFiles", err)
				}
				if _, err := r.Create(ctx, spec); !errors.Is(err, runtime.ErrExists) {
					t.Errorf("a second reboot of a running sandbox: %v, want ErrExists", err)
				}
			})
		}
		t.Run("a sandbox killed while its files are kept leaves nothing", func(t *testing.T) {
			s := create(t, r, runtime.Spec{Rootfs: rootfs, Start: true, Limits: runtime.Limits{DiskBytes: 64 << 20}, Args: sh(`echo up; sleep 1000`)})
			s.stdout.waitFor(t, "up", 10*time.Second)
			if _, err := r.StopKeepFiles(ctx, s.id); err != nil {
				t.Fatalf("stop: %v", err)
			}
			if err := r.Destroy(ctx, s.id); err != nil {
				t.Fatal(err)
			}
			if left := leaks(t, r, s.id, s.sb.Pid); len(left) > 0 {
				t.Errorf("left: %s", strings.Join(left, "; "))
			}
			ids, _ := r.List(ctx)
			for _, id := range ids {
				if id == s.id {
					t.Error("its directory is left")
				}
			}
			if _, err := os.Stat(r.UpperDir(s.id)); err == nil {
				t.Error("its upper dir is left")
			}
		})
		t.Run("a reboot without kept files is refused", func(t *testing.T) {
			if _, err := r.Create(ctx, runtime.Spec{ID: newID(t), Rootfs: rootfs, Args: sh("true"), Reboot: true}); !errors.Is(err, runtime.ErrNoKeptFiles) {
				t.Errorf("reboot of nothing: %v, want ErrNoKeptFiles", err)
			}
		})
	})
}
