package files_test

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
)

// TestUploadShowsOnlyTheTargetName watches the upload directory with inotify and checks that
// every event names a file the upload was asked to write: no temporary name ever shows.
func TestUploadShowsOnlyTheTargetName(t *testing.T) {
	t.Parallel()
	srv := serve(t, "")
	tests := []struct {
		name     string
		existing bool
		count    int
	}{
		{"one new file", false, 1},
		{"one file replacing an existing one", true, 1},
		{"many files at once in one multipart body", false, 40},
		{"many files at once replacing existing ones", true, 40},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			var parts [][2]string
			want := map[string]bool{}
			for i := range tt.count {
				p := filepath.Join(dir, fmt.Sprintf("f%02d.txt", i))
				want[p] = true
				parts = append(parts, [2]string{p, strings.Repeat("x", 1<<16)})
				if tt.existing {
					if err := os.WriteFile(p, []byte("old"), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			w, err := fsnotify.NewWatcher()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { w.Close() })
			if err := w.Add(dir); err != nil {
				t.Fatal(err)
			}
			// A marker file written after the upload tells when every upload event has arrived.
			marker := filepath.Join(dir, "zz-marker")
			var q url.Values
			if tt.count == 1 {
				q = url.Values{"path": {parts[0][0]}}
			}
			ct, body := multipartBody(t, parts...)
			req, _ := http.NewRequest(http.MethodPost, fileURL(srv, q), body)
			req.Header.Set("Content-Type", ct)
			if res, b := do(t, req); res.StatusCode != 200 {
				t.Fatalf("upload: %d %s", res.StatusCode, b)
			}
			if err := os.WriteFile(marker, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			seen := map[string]bool{}
			deadline := time.After(30 * time.Second)
			for {
				select {
				case ev := <-w.Events:
					if ev.Name == marker {
						for p := range want {
							if !seen[p] {
								t.Errorf("no event for %s", p)
							}
							if b, err := os.ReadFile(p); err != nil || len(b) != 1<<16 {
								t.Errorf("%s: %d bytes (%v), want %d", p, len(b), err, 1<<16)
							}
						}
						return
					}
					if !want[ev.Name] {
						t.Errorf("event %s for %q, which is not an uploaded file's name", ev.Op, ev.Name)
					}
					seen[ev.Name] = true
				case err := <-w.Errors:
					t.Fatalf("watcher: %v", err)
				case <-deadline:
					t.Fatal("no event for the marker within 30 s")
				}
			}
		})
	}
}

// TestDownloadOfAFileStatReportsEmpty downloads files whose size stat reports as 0 but that
// have content, as /proc's do, with and without gzip.
func TestDownloadOfAFileStatReportsEmpty(t *testing.T) {
	t.Parallel()
	srv := serve(t, "")
	fi, err := os.Stat("/proc/self/status")
	if err != nil || fi.Size() != 0 {
		t.Skipf("needs /proc/self/status with a stat size of 0 (%v)", err)
	}
	tests := []struct {
		name   string
		header http.Header
	}{
		{"plain", nil},
		{"asking for gzip", http.Header{"Accept-Encoding": {"gzip"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name+" returns the content", func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, fileURL(srv, url.Values{"path": {"/proc/self/status"}}), nil)
			for k, v := range tt.header {
				req.Header[k] = v
			}
			res, raw := do(t, req)
			var b strings.Builder
			if res.Header.Get("Content-Encoding") == "gzip" {
				zr, err := gzip.NewReader(bytes.NewReader(raw))
				if err != nil {
					t.Fatal(err)
				}
				if _, err := io.Copy(&b, zr); err != nil {
					t.Fatal(err)
				}
			} else {
				b.Write(raw)
			}
			if res.StatusCode != 200 || !strings.Contains(b.String(), "Pid:") {
				t.Fatalf("status %d, body %q: want 200 with the file's content", res.StatusCode, b.String())
			}
		})
	}
}
