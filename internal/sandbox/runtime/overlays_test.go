package runtime

import (
	"os"
	"path/filepath"
	"testing"
)

// TestOverlayRecordsCountOnlyWhileMounted: a record whose mount point is no mount (its
// overlay is gone, a crash left the record) counts for nothing and is removed; one whose mount
// point is mounted counts its lowers.
func TestOverlayRecordsCountOnlyWhileMounted(t *testing.T) {
	old := OverlayRecords
	OverlayRecords = filepath.Join(t.TempDir(), "overlays")
	t.Cleanup(func() { OverlayRecords = old })
	if err := recordOverlay(filepath.Join(t.TempDir(), "not-mounted"), []string{"/stale/layer/diff"}); err != nil {
		t.Fatal(err)
	}
	// "/" is a mount point on every host: a record of it stands for a live overlay.
	if err := recordOverlay("/", []string{"/live/layer/diff"}); err != nil {
		t.Fatal(err)
	}
	got := MountedLowers()
	if got["/stale/layer/diff"] || !got["/live/layer/diff"] {
		t.Fatalf("lowers %v", got)
	}
	entries, _ := os.ReadDir(OverlayRecords)
	if len(entries) != 1 {
		t.Fatalf("%d records left; the stale one should be gone", len(entries))
	}
	forgetOverlay("/")
	if MountedLowers()["/live/layer/diff"] {
		t.Fatal("a forgotten overlay still counts")
	}
}
