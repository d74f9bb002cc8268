package runtime

import (
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"
)

// writePages writes a pages-1.img of mb MiB under dir, random or zero.
func writePages(t testing.TB, dir string, mb int, random bool) string {
	t.Helper()
	b := make([]byte, mb<<20)
	if random {
		_, _ = rand.Read(b)
	}
	path := filepath.Join(dir, "pages-1.img")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestSparsifyPunchesHolesOverZeroBlocksOnly(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "pages-1.img")
	// random, zeros, random, a zero tail shorter than a block
	b := make([]byte, 3*sparseBlock*8+100)
	_, _ = rand.Read(b[:sparseBlock*8])
	_, _ = rand.Read(b[2*sparseBlock*8 : 3*sparseBlock*8])
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "core-1.img") // not a memory image: left alone
	if err := os.WriteFile(other, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	freed, err := sparsify(dir)
	if err != nil {
		t.Fatal(err)
	}
	if freed != sparseBlock*8 {
		t.Errorf("freed %d bytes, want the %d of the zero run", freed, sparseBlock*8)
	}
	got, _ := os.ReadFile(path)
	if string(got) != string(b) {
		t.Errorf("the file reads back different after the holes")
	}
	if fi, _ := os.Stat(other); allocated(fi) < 1<<20 {
		t.Errorf("a file that is not a memory image was made sparse")
	}
}

func BenchmarkSparsify64MB(b *testing.B) {
	for _, c := range []struct {
		name   string
		random bool
	}{{"zeros", false}, {"random", true}} {
		b.Run(c.name, func(b *testing.B) {
			dir := b.TempDir()
			b.SetBytes(64 << 20)
			for b.Loop() {
				b.StopTimer()
				writePages(b, dir, 64, c.random)
				b.StartTimer()
				if _, err := sparsify(dir); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
