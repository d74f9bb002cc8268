package files_test

import (
	"bytes"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkUpload64MiB uploads 64 MiB as an octet-stream body, to a new file (the unnamed
// file the body went to is linked in) and over an existing one (it is copied over the file).
//
//	go test -run '^$' -bench Upload64MiB -benchtime 20x ./internal/guest/envd/files/
func BenchmarkUpload64MiB(b *testing.B) {
	srv := serve(b, "")
	data := bytes.Repeat([]byte("0123456789abcdef"), 4<<20) // 64 MiB
	for _, existing := range []bool{false, true} {
		name := "new file"
		if existing {
			name = "existing file"
		}
		b.Run(name, func(b *testing.B) {
			dir := b.TempDir()
			p := filepath.Join(dir, "big.bin")
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				b.StopTimer()
				if existing {
					if err := os.WriteFile(p, []byte("old"), 0o644); err != nil {
						b.Fatal(err)
					}
				} else if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
					b.Fatal(err)
				}
				req, _ := http.NewRequest(http.MethodPost, fileURL(srv, url.Values{"path": {p}}), bytes.NewReader(data))
				req.Header.Set("Content-Type", "application/octet-stream")
				b.StartTimer()
				if res, body := do(b, req); res.StatusCode != http.StatusOK {
					b.Fatalf("upload: %d %s", res.StatusCode, body)
				}
			}
		})
	}
}
