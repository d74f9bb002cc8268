package layering

import (
	"os"
	"slices"
	"testing"
)

// planes are internal/'s folders: one per plane (docs/architecture.md, "The house") and the
// leaves every plane shares. A package of a plane goes in its plane's folder, so a new
// sibling of these is a package that has not said which plane it serves.
var planes = []string{
	"control", "sandbox", "observe", "builder", "guest", // the planes
	"httpx", "errdefs", "store", "blob", "covetest", "layering", // the shared leaves
}

func TestEveryPackageLivesInItsPlane(t *testing.T) {
	entries, err := os.ReadDir("..")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() && !slices.Contains(planes, e.Name()) {
			t.Errorf("internal/%s is no plane's: move it under internal/control, sandbox, observe, builder or guest (or, a leaf every plane shares, list it here and in docs/architecture.md)", e.Name())
		}
	}
	for _, p := range planes {
		if _, err := os.Stat("../" + p); err != nil {
			t.Errorf("internal/%s is listed as a plane or leaf but is missing: %v", p, err)
		}
	}
}
