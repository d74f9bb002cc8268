package runtime

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestStagedBinariesAreSharedByContentAndTheOldestGo(t *testing.T) {
	root := filepath.Join(t.TempDir(), "cove-envd")
	src := t.TempDir()
	build := func(name, content string) string {
		p := filepath.Join(src, name)
		if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	a, err := stageBinary(root, build("a", "build one"))
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(a); string(b) != "build one" {
		t.Fatalf("staged %s holds %q", a, b)
	}
	if fi, err := os.Stat(a); err != nil || fi.Mode().Perm() != 0o555 {
		t.Errorf("staged mode %v %v, want read and execute only", fi.Mode(), err)
	}
	again, err := stageBinary(root, build("a-copy", "build one"))
	if err != nil || again != a {
		t.Errorf("the same content staged at %s (%v), want %s", again, err, a)
	}
	var last string
	for i, content := range []string{"two", "three", "four", "five"} {
		time.Sleep(10 * time.Millisecond) // distinct times: the oldest goes first
		if last, err = stageBinary(root, build(content, content)); err != nil {
			t.Fatalf("stage %d: %v", i, err)
		}
	}
	entries, _ := os.ReadDir(root)
	if len(entries) != keepStaged+1 {
		t.Errorf("%d builds kept, want the current one and %d others", len(entries), keepStaged)
	}
	if _, err := os.Stat(a); !os.IsNotExist(err) {
		t.Errorf("the oldest build is still staged: %v", err)
	}
	if _, err := os.Stat(last); err != nil {
		t.Errorf("the current build is gone: %v", err)
	}
}
