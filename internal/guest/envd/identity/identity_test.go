package identity

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestAccountStampChangesWithTheFiles: a write in place (same size) and a replacement by
// rename (as useradd does) both give a new stamp, and a new stamp empties the cache.
func TestAccountStampChangesWithTheFiles(t *testing.T) {
	dir := t.TempDir()
	files := [2]string{filepath.Join(dir, "passwd"), filepath.Join(dir, "group")}
	for _, f := range files {
		if err := os.WriteFile(f, []byte("root:x:0:0::/root:/bin/sh\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s0 := stampOf(files)
	if s0 != stampOf(files) {
		t.Fatal("the stamp of unchanged files changed")
	}

	// In place, same size, a later modification time.
	later := time.Now().Add(time.Second)
	if err := os.WriteFile(files[0], []byte("toor:x:0:0::/root:/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(files[0], later, later); err != nil {
		t.Fatal(err)
	}
	s1 := stampOf(files)
	if s1 == s0 {
		t.Error("a write in place did not change the stamp")
	}

	// Replaced by rename, same size and modification time: a new inode.
	tmp := files[1] + "+"
	if err := os.WriteFile(tmp, []byte("root:x:0:0::/root:/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(files[1])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(tmp, st.ModTime(), st.ModTime()); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, files[1]); err != nil {
		t.Fatal(err)
	}
	if s2 := stampOf(files); s2 == s1 {
		t.Error("a replacement by rename did not change the stamp")
	}

	// The cache is emptied by a stamp other than its own.
	cachedAt("someone", s0)
	accounts.Lock()
	accounts.users["someone"] = &User{Name: "someone"}
	accounts.Unlock()
	if cachedAt("someone", s0) == nil {
		t.Error("the cached account is gone under the same stamp")
	}
	if cachedAt("someone", s1) != nil {
		t.Error("the cached account survived a change of the files")
	}
}

// BenchmarkFromBasicAuth is the user lookup every command's Start makes (no Authorization
// header, no /init: the default user).
func BenchmarkFromBasicAuth(b *testing.B) {
	d := &Defaults{}
	h := http.Header{}
	for b.Loop() {
		if _, err := d.FromBasicAuth(h); err != nil {
			b.Fatal(err)
		}
	}
}
