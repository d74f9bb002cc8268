package runtime_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/sandbox/runtime"
	"github.com/cove-dev/cove/internal/sandbox/runtime/runtimetest"
)

// BenchmarkEngines measures the engines side by side: create until the init runs (its first
// line arrives), a freeze and thaw, and a checkpoint and restore of a sandbox holding 64 MB
// of random bytes. Run with -benchtime=10x or so: each checkpoint writes 64 MB.
func BenchmarkEngines(b *testing.B) {
	for _, e := range engines {
		b.Run(string(e), func(b *testing.B) {
			r := runtimetest.RuncWith(b, runtime.Config{DefaultEngine: e})
			runtimetest.Engine(b, r, e)
			rootfs := runtimetest.BusyboxRootfs(b)
			ctx := context.Background()
			b.Run("create to init running", func(b *testing.B) {
				n := 0
				for b.Loop() {
					n++
					id := fmt.Sprintf("bench-%s-%d-%d", e, n, time.Now().UnixNano()%1e9)
					sb, err := r.Create(ctx, runtime.Spec{ID: id, Rootfs: rootfs, Start: true, Args: sh("echo ready; exec sleep 300")})
					if err != nil {
						b.Fatal(err)
					}
					line := make([]byte, 6)
					if _, err := sb.Stdout.Read(line); err != nil && !strings.HasPrefix(string(line), "ready") {
						b.Fatalf("read the init's first line: %v", err)
					}
					b.StopTimer()
					sb.Stdout.Close()
					sb.Stderr.Close()
					if err := r.Destroy(ctx, id); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
			})
			b.Run("freeze and thaw", func(b *testing.B) {
				s := benchSandbox(b, r, rootfs, sh(`while :; do usleep 1000; done`))
				for b.Loop() {
					if err := r.Freeze(ctx, s); err != nil {
						b.Fatal(err)
					}
					if err := r.Thaw(ctx, s); err != nil {
						b.Fatal(err)
					}
				}
			})
			if e == runtime.EngineRunsc {
				// What the driver does not use, for comparison: the host's cgroup v1 freezer
				// on the sentry's threads (runsc state does not see it).
				b.Run("freeze and thaw by the cgroup freezer", func(b *testing.B) {
					s := benchSandbox(b, r, rootfs, sh(`while :; do usleep 1000; done`))
					state := filepath.Join("/sys/fs/cgroup/freezer", r.CgroupPath(s), "freezer.state")
					for b.Loop() {
						for _, want := range []string{"FROZEN", "THAWED"} {
							if err := os.WriteFile(state, []byte(want), 0); err != nil {
								b.Fatal(err)
							}
							for {
								got, _ := os.ReadFile(state)
								if strings.TrimSpace(string(got)) == want {
									break
								}
								time.Sleep(100 * time.Microsecond)
							}
						}
					}
				})
			}
			b.Run("checkpoint and restore 64 MB", func(b *testing.B) {
				if err := r.CanCheckpointOn(e); err != nil {
					b.Skipf("checkpoints unavailable: %v", err)
				}
				s := benchSandbox(b, r, rootfs, sh(memoryHolder("/dev/urandom", 64)))
				var ckpt, restore time.Duration
				var bytes int64
				for b.Loop() {
					t0 := time.Now()
					info, err := r.Checkpoint(ctx, s)
					if err != nil {
						b.Fatal(err)
					}
					bytes += info.Bytes
					t1 := time.Now()
					sb, err := r.Restore(ctx, s)
					if err != nil {
						b.Fatal(err)
					}
					restore += time.Since(t1)
					ckpt += t1.Sub(t0)
					collect(sb.Stdout)
					collect(sb.Stderr)
				}
				b.ReportMetric(float64(ckpt.Milliseconds())/float64(b.N), "checkpoint-ms/op")
				b.ReportMetric(float64(restore.Milliseconds())/float64(b.N), "restore-ms/op")
				b.ReportMetric(float64(bytes)/float64(b.N)/(1<<20), "image-MiB/op")
			})
		})
	}
}

// benchSandbox starts a sandbox running args, waits for it to run (for "ready" when args
// print it), and destroys it when b ends.
func benchSandbox(b *testing.B, r *runtime.Runc, rootfs string, args []string) string {
	b.Helper()
	id := fmt.Sprintf("bench-%d", time.Now().UnixNano()%1e9)
	sb, err := r.Create(context.Background(), runtime.Spec{ID: id, Rootfs: rootfs, Start: true, Args: args})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = r.Destroy(context.Background(), id) })
	out := collect(sb.Stdout)
	collect(sb.Stderr)
	if strings.Contains(strings.Join(args, " "), "echo ready") {
		deadline := time.Now().Add(60 * time.Second)
		for !strings.Contains(out.String(), "ready") {
			if time.Now().After(deadline) {
				b.Fatal("the sandbox did not get ready")
			}
			time.Sleep(10 * time.Millisecond)
		}
	} else {
		time.Sleep(100 * time.Millisecond)
	}
	return id
}
