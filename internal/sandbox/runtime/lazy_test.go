package runtime_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/sandbox/runtime"
	"github.com/cove-dev/cove/internal/sandbox/runtime/runtimetest"
)

// TestALazyRestoreRunsWithItsMemoryIntact: a sandbox restored with its pages served on
// demand answers with the same memory (a hash of the 8 MB its shell holds), three restores
// in a row, each checkpoint waiting for the last restore's pages to be in.
func TestALazyRestoreRunsWithItsMemoryIntact(t *testing.T) {
	r := runtimetest.RuncWith(t, runtime.Config{LazyRestore: true})
	if err := r.CanCheckpoint(); err != nil {
		t.Skipf("checkpoints unavailable: %v", err)
	}
	rootfs := runtimetest.BusyboxRootfs(t)
	s := create(t, r, runtime.Spec{Rootfs: rootfs, Start: true, Args: sh(
		`v=$(head -c 6000000 /dev/urandom | base64); echo sum-$(printf %s "$v" | sha256sum | cut -c1-16); trap 'echo answer-$(printf %s "$v" | sha256sum | cut -c1-16)' USR1; while :; do sleep 0.05; done`)})
	s.stdout.waitFor(t, "sum-", 30*time.Second)
	sum := strings.Fields(strings.TrimPrefix(s.stdout.String(), "sum-"))[0]
	if len(sum) != 16 {
		t.Skipf("the rootfs cannot hash: %q", s.stdout.String())
	}
	for i := range 3 {
		if _, err := r.Checkpoint(context.Background(), s.id); err != nil {
			t.Fatalf("checkpoint %d: %v", i+1, err)
		}
		wait(t, r, s.id)
		restoreAndAsk(t, r, s.id).waitFor(t, "answer-"+sum, 20*time.Second)
	}
}
