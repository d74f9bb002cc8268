package template

import (
	"os"
	"path/filepath"
	"testing"
)

func TestOpeningTheStoreNeverSweepsABuildInProgress(t *testing.T) {
	dir := t.TempDir()
	s, err := openDir(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	busy := filepath.Join(s.Dir(), ".build-busy-1")
	left := filepath.Join(s.Dir(), ".build-left-1")
	for _, d := range []string{busy, left} {
		if err := os.MkdirAll(filepath.Join(d, "rootfs"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	unlock, err := LockDir(busy) // as a build in another process holds it
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	if _, err := openDir(t, dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(busy); err != nil {
		t.Errorf("a locked build was swept: %v", err)
	}
	if _, err := os.Stat(left); !os.IsNotExist(err) {
		t.Errorf("an abandoned build was kept: %v", err)
	}
}
