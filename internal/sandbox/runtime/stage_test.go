package runtime

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
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

func TestAStagedBuildALiveServerRunsIsNotPruned(t *testing.T) {
	root := filepath.Join(t.TempDir(), "cove-envd")
	src := t.TempDir()
	build := func(content string) string {
		p := filepath.Join(src, content)
		if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	running, err := stageBinary(root, build("the running server's"))
	if err != nil {
		t.Fatal(err)
	}
	// Another server runs it: it holds the build's in-use lock (its own open file).
	f, err := os.OpenFile(filepath.Join(filepath.Dir(running), inUseFile), os.O_CREATE|os.O_RDONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH); err != nil {
		t.Fatal(err)
	}
	for _, content := range []string{"two", "three", "four", "five", "six"} {
		time.Sleep(10 * time.Millisecond)
		if _, err := stageBinary(root, build(content)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(running); err != nil {
		t.Fatalf("the build a live server runs was pruned: %v", err)
	}
	_ = unix.Flock(int(f.Fd()), unix.LOCK_UN) // that server stopped
	if _, err := stageBinary(root, build("seven")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(running); !os.IsNotExist(err) {
		t.Errorf("the oldest build, run by no server now, is still staged: %v", err)
	}
}
