package files_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cove-dev/cove/internal/guest/envd/files"
	"github.com/cove-dev/cove/internal/guest/envd/identity"
	cove "github.com/cove-dev/cove/sdk"
)

// checkAnswer fails unless res is a 200 or a 4xx/5xx with envd's JSON error body.
func checkAnswer(t *testing.T, res *httptest.ResponseRecorder, ok ...int) {
	t.Helper()
	for _, s := range append(ok, http.StatusOK) {
		if res.Code == s {
			return
		}
	}
	if res.Code < 400 || res.Code > 599 {
		t.Fatalf("status %d", res.Code)
	}
	var b cove.ErrorBody
	if err := json.Unmarshal(res.Body.Bytes(), &b); err != nil || b.Code != res.Code || b.Message == "" {
		t.Fatalf("status %d with body %q is not a JSON error (%v)", res.Code, res.Body.Bytes(), err)
	}
}

func FuzzUpload(f *testing.F) {
	ct, mp := multipartBody(f, [2]string{"a.txt", "hello"})
	f.Add(mp.Bytes(), ct, "")
	f.Add([]byte("raw bytes"), "application/octet-stream", "")
	f.Add(gzipped("zipped").Bytes(), "application/octet-stream", "gzip")
	f.Add([]byte("--x\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nbody\r\n--x--\r\n"), "multipart/form-data; boundary=x", "")
	f.Add([]byte{}, "", "br")

	h := files.New(&identity.Defaults{})
	f.Fuzz(func(t *testing.T, body []byte, contentType, encoding string) {
		dir := t.TempDir()
		// The path is always given, so a fuzzed part filename can never name a file outside dir.
		q := url.Values{"path": {filepath.Join(dir, "sub", "out")}}
		req := httptest.NewRequest(http.MethodPost, "/files?"+q.Encode(), bytes.NewReader(body))
		req.Header.Set("Content-Type", contentType)
		req.Header.Set("Content-Encoding", encoding)
		res := httptest.NewRecorder()
		h.ServeHTTP(res, req)
		checkAnswer(t, res)
		if res.Code == http.StatusOK {
			var entries []files.Entry
			if err := json.Unmarshal(res.Body.Bytes(), &entries); err != nil || len(entries) == 0 {
				t.Fatalf("200 with answer %q", res.Body.Bytes())
			}
		}
	})
}

func FuzzDownloadPath(f *testing.F) {
	f.Add("f.txt", "")
	f.Add("f.txt", "bytes=2-4")
	f.Add("f.txt", "bytes=-3")
	f.Add("f.txt", "bytes=0-1,3-4")
	f.Add("", "bytes=99-")
	f.Add("dir/../f.txt", "bytes=x")
	f.Add("dir", "")
	f.Add("missing\x00", "")

	dir := f.TempDir()
	const content = "0123456789"
	if err := os.WriteFile(filepath.Join(dir, "f.txt"), []byte(content), 0o644); err != nil {
		f.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "dir"), 0o755); err != nil {
		f.Fatal(err)
	}
	h := files.New(&identity.Defaults{})
	f.Fuzz(func(t *testing.T, p, rng string) {
		full := dir + "/" + p
		// Only paths that stay inside dir are served: the fuzzer must not read the machine.
		if rel, err := filepath.Rel(dir, filepath.Clean(full)); err != nil || strings.HasPrefix(rel, "..") {
			t.Skip()
		}
		q := url.Values{"path": {full}}
		req := httptest.NewRequest(http.MethodGet, "/files?"+q.Encode(), nil)
		if rng != "" {
			req.Header.Set("Range", rng)
		}
		res := httptest.NewRecorder()
		h.ServeHTTP(res, req)
		checkAnswer(t, res, http.StatusPartialContent)
		if res.Code == http.StatusOK && res.Body.String() != content {
			t.Fatalf("200 with body %q", res.Body.String())
		}
	})
}
