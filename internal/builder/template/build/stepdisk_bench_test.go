package build_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/cove-dev/cove/internal/builder/template"
	"github.com/cove-dev/cove/internal/builder/template/build"
	"github.com/cove-dev/cove/internal/sandbox/runtime"
	"github.com/cove-dev/cove/internal/sandbox/runtime/runtimetest"
)

// BenchmarkStepDisk measures what a RUN step's own disk (a team's build, --disk-size-mb)
// costs over writing straight into the store: a step writing 10 MB, rebuilt every time.
// Compare the two sub-benchmarks' ns/op.
func BenchmarkStepDisk(b *testing.B) {
	rt := runtimetest.Runc(b)
	store, err := build.OpenData(b, b.TempDir(), rt)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if _, err := store.Import(ctx, "busybox", runtimetest.BusyboxRootfs(b), nil); err != nil {
		b.Fatal(err)
	}
	images := b.TempDir()
	for _, disk := range []int64{0, 256 << 20} {
		name := "store disk"
		if disk > 0 {
			name = fmt.Sprintf("step disk of %d MB", disk>>20)
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				_, err := store.Build(ctx, build.Spec{Name: "bench", From: "busybox", Force: true, Replace: true,
					Limits: runtime.Limits{DiskBytes: disk}, DiskImages: images,
					Steps: []template.Step{{Kind: template.StepRun, Args: []string{"dd if=/dev/zero of=/ten bs=1M count=10 2>/dev/null", "root"}}}}, nil)
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
