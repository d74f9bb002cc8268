package files_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/guest/envd/files"
	"github.com/cove-dev/cove/internal/guest/envd/identity"
	"github.com/cove-dev/cove/internal/httpx"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	cove "github.com/cove-dev/cove/sdk"
)

// serve starts /files behind a real HTTP server; token, when set, is the sandbox's access token.
func serve(t testing.TB, token string) *httptest.Server {
	t.Helper()
	d := &identity.Defaults{}
	if token != "" {
		d.Update(nil, nil, nil, &token)
	}
	mux := http.NewServeMux()
	mux.Handle("/files", files.New(d))
	srv := httptest.NewServer(httpx.RequestIDs(nil, mux))
	t.Cleanup(srv.Close)
	return srv
}

// rawClient does not ask for gzip, so headers are seen as sent.
var rawClient = &http.Client{Transport: &http.Transport{DisableCompression: true}}

func fileURL(srv *httptest.Server, q url.Values) string {
	return srv.URL + "/files?" + q.Encode()
}

func do(t testing.TB, req *http.Request) (*http.Response, []byte) {
	t.Helper()
	res, err := rawClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, body
}

// errorBody checks that body is envd's JSON error for status.
func errorBody(t testing.TB, status int, body []byte) cove.ErrorBody {
	t.Helper()
	var b cove.ErrorBody
	if err := json.Unmarshal(body, &b); err != nil || b.Code != status || b.Message == "" {
		t.Fatalf("body %q is not a JSON error with code %d (%v)", body, status, err)
	}
	return b
}

func TestDownload(t *testing.T) {
	t.Parallel()
	srv := serve(t, "")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "hello.txt"), []byte("hello world"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "empty"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		path       string
		header     http.Header
		wantStatus int
		wantBody   string
		wantLength string
	}{
		{"a file comes back raw", filepath.Join(dir, "hello.txt"), nil, 200, "hello world", "11"},
		{"a range comes back partial", filepath.Join(dir, "hello.txt"), http.Header{"Range": {"bytes=6-"}}, 206, "world", "5"},
		{"an empty file has Content-Length 0", filepath.Join(dir, "empty"), nil, 200, "", "0"},
		{"an empty file stays plain when gzip is accepted", filepath.Join(dir, "empty"), http.Header{"Accept-Encoding": {"gzip"}}, 200, "", "0"},
		{"an unsatisfiable range is a JSON 416", filepath.Join(dir, "hello.txt"), http.Header{"Range": {"bytes=100-"}}, 416, "", ""},
		{"a directory is 400", dir, nil, 400, "", ""},
		{"a missing file is 404", filepath.Join(dir, "nope"), nil, 404, "", ""},
		{"a missing path is 400", "", nil, 400, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			q := url.Values{}
			if tt.path != "" {
				q.Set("path", tt.path)
			}
			req, _ := http.NewRequest(http.MethodGet, fileURL(srv, q), nil)
			for k, v := range tt.header {
				req.Header[k] = v
			}
			res, body := do(t, req)
			if res.StatusCode != tt.wantStatus {
				t.Fatalf("status = %d (%s), want %d", res.StatusCode, body, tt.wantStatus)
			}
			if tt.wantStatus >= 400 {
				b := errorBody(t, tt.wantStatus, body)
				if b.RequestID == "" || res.Header.Get(telemetry.HeaderRequestID) != b.RequestID {
					t.Errorf("request id %q not echoed", b.RequestID)
				}
				return
			}
			if string(body) != tt.wantBody || res.Header.Get("Content-Length") != tt.wantLength {
				t.Errorf("body %q length %q, want %q length %q", body, res.Header.Get("Content-Length"), tt.wantBody, tt.wantLength)
			}
			if ct := res.Header.Get("Content-Type"); ct != "application/octet-stream" {
				t.Errorf("content type = %q", ct)
			}
		})
	}
	t.Run("gzip is used when accepted", func(t *testing.T) {
		t.Parallel()
		req, _ := http.NewRequest(http.MethodGet, fileURL(srv, url.Values{"path": {filepath.Join(dir, "hello.txt")}}), nil)
		req.Header.Set("Accept-Encoding", "gzip")
		res, body := do(t, req)
		if res.Header.Get("Content-Encoding") != "gzip" {
			t.Fatalf("content encoding = %q", res.Header.Get("Content-Encoding"))
		}
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := io.ReadAll(zr); string(got) != "hello world" {
			t.Errorf("body = %q", got)
		}
	})
}

func multipartBody(t testing.TB, parts ...[2]string) (string, *bytes.Buffer) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, p := range parts {
		w, err := mw.CreateFormFile("file", p[0])
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(w, p[1])
	}
	mw.Close()
	return mw.FormDataContentType(), &buf
}

func gzipped(s string) *bytes.Buffer {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	io.WriteString(zw, s)
	zw.Close()
	return &buf
}

func TestUpload(t *testing.T) {
	t.Parallel()
	srv := serve(t, "")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "existing"), []byte("old content"), 0o600); err != nil {
		t.Fatal(err)
	}
	type file struct{ path, data string }
	tests := []struct {
		name       string
		query      url.Values
		body       func() (contentType string, body io.Reader, header http.Header)
		wantStatus int
		want       []file
	}{
		{"multipart with the path in the query", url.Values{"path": {filepath.Join(dir, "q", "one.txt")}},
			func() (string, io.Reader, http.Header) {
				ct, b := multipartBody(t, [2]string{"ignored-name", "one"})
				return ct, b, nil
			}, 200, []file{{filepath.Join(dir, "q", "one.txt"), "one"}}},
		{"multipart with several files named by their part filenames", url.Values{},
			func() (string, io.Reader, http.Header) {
				ct, b := multipartBody(t, [2]string{filepath.Join(dir, "m", "a.txt"), "A"}, [2]string{filepath.Join(dir, "m", "deep", "b.txt"), "B"})
				return ct, b, nil
			}, 200, []file{{filepath.Join(dir, "m", "a.txt"), "A"}, {filepath.Join(dir, "m", "deep", "b.txt"), "B"}}},
		{"octet-stream replaces an existing file", url.Values{"path": {filepath.Join(dir, "existing")}},
			func() (string, io.Reader, http.Header) {
				return "application/octet-stream", strings.NewReader("new"), nil
			}, 200, []file{{filepath.Join(dir, "existing"), "new"}}},
		{"octet-stream with gzip is decoded", url.Values{"path": {filepath.Join(dir, "gz", "z.txt")}},
			func() (string, io.Reader, http.Header) {
				return "application/octet-stream", gzipped("unzipped"), http.Header{"Content-Encoding": {"gzip"}}
			}, 200, []file{{filepath.Join(dir, "gz", "z.txt"), "unzipped"}}},
		{"a chunked body without Content-Length is streamed", url.Values{"path": {filepath.Join(dir, "chunked.bin")}},
			func() (string, io.Reader, http.Header) {
				pr, pw := io.Pipe()
				go func() {
					for i := 0; i < 100; i++ {
						fmt.Fprintf(pw, "chunk %03d\n", i)
					}
					pw.Close()
				}()
				return "application/octet-stream", pr, nil
			}, 200, []file{{filepath.Join(dir, "chunked.bin"), chunks(100)}}},
		{"a multipart body that is not multipart is 400", url.Values{"path": {filepath.Join(dir, "bad")}},
			func() (string, io.Reader, http.Header) {
				return "multipart/form-data; boundary=xyz", strings.NewReader("garbage"), nil
			}, 400, nil},
		{"a multipart body without a boundary is 400", url.Values{"path": {filepath.Join(dir, "bad")}},
			func() (string, io.Reader, http.Header) {
				return "multipart/form-data", strings.NewReader("garbage"), nil
			}, 400, nil},
		{"a multipart body without a file part is 400", url.Values{"path": {filepath.Join(dir, "bad")}},
			func() (string, io.Reader, http.Header) {
				var buf bytes.Buffer
				mw := multipart.NewWriter(&buf)
				mw.WriteField("other", "x")
				mw.Close()
				return mw.FormDataContentType(), &buf, nil
			}, 400, nil},
		{"octet-stream without a path is 400", url.Values{},
			func() (string, io.Reader, http.Header) {
				return "application/octet-stream", strings.NewReader("x"), nil
			}, 400, nil},
		{"a broken gzip body is 400", url.Values{"path": {filepath.Join(dir, "bad")}},
			func() (string, io.Reader, http.Header) {
				return "application/octet-stream", strings.NewReader("not gzip"), http.Header{"Content-Encoding": {"gzip"}}
			}, 400, nil},
		{"writing over a directory is 400", url.Values{"path": {dir}},
			func() (string, io.Reader, http.Header) {
				return "application/octet-stream", strings.NewReader("x"), nil
			}, 400, nil},
		{"an unknown content type is 400", url.Values{"path": {filepath.Join(dir, "bad")}},
			func() (string, io.Reader, http.Header) {
				return "text/plain", strings.NewReader("x"), nil
			}, 400, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ct, body, header := tt.body()
			req, _ := http.NewRequest(http.MethodPost, fileURL(srv, tt.query), body)
			req.Header.Set("Content-Type", ct)
			for k, v := range header {
				req.Header[k] = v
			}
			res, out := do(t, req)
			if res.StatusCode != tt.wantStatus {
				t.Fatalf("status = %d (%s), want %d", res.StatusCode, out, tt.wantStatus)
			}
			if tt.wantStatus != 200 {
				errorBody(t, tt.wantStatus, out)
				if _, err := os.Stat(filepath.Join(dir, "bad")); err == nil {
					t.Error("a failed upload left a file")
				}
				return
			}
			var entries []files.Entry
			if err := json.Unmarshal(out, &entries); err != nil {
				t.Fatalf("answer %q: %v", out, err)
			}
			if len(entries) != len(tt.want) {
				t.Fatalf("entries = %+v, want %d", entries, len(tt.want))
			}
			for i, w := range tt.want {
				if e := entries[i]; e.Path != w.path || e.Name != filepath.Base(w.path) || e.Type != "file" {
					t.Errorf("entry %d = %+v, want path %s", i, e, w.path)
				}
				got, err := os.ReadFile(w.path)
				if err != nil || string(got) != w.data {
					t.Errorf("%s = %q (%v), want %q", w.path, got, err, w.data)
				}
			}
		})
	}
	leftovers, _ := filepath.Glob(filepath.Join(dir, ".cove-upload-*"))
	if len(leftovers) > 0 {
		t.Errorf("temporary files left: %v", leftovers)
	}
}

func chunks(n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "chunk %03d\n", i)
	}
	return b.String()
}

func TestAccess(t *testing.T) {
	t.Parallel()
	const token = "secret-token"
	srv := serve(t, token)
	dir := t.TempDir()
	path := filepath.Join(dir, "f.txt")
	if err := os.WriteFile(path, []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	future := time.Now().Add(time.Minute).Unix()
	past := time.Now().Add(-time.Minute).Unix()
	signed := func(op, user string, exp int64) url.Values {
		q := url.Values{"path": {path}, "signature": {files.Sign(path, op, user, token, exp)}}
		if user != "" {
			q.Set("username", user)
		}
		if exp != 0 {
			q.Set("signature_expiration", strconv.FormatInt(exp, 10))
		}
		return q
	}
	tests := []struct {
		name       string
		method     string
		query      url.Values
		header     string
		wantStatus int
		wantMsg    string
	}{
		{"no token and no signature is 401", "GET", url.Values{"path": {path}}, "", 401, ""},
		{"the access token header lets a read in", "GET", url.Values{"path": {path}}, token, 200, ""},
		{"a wrong access token is 401", "GET", url.Values{"path": {path}}, "nope", 401, ""},
		{"a read signature without user lets a read in", "GET", signed("read", "", 0), "", 200, ""},
		{"a read signature for root lets root read", "GET", signed("read", "root", 0), "", 200, ""},
		{"a write signature lets a write in", "POST", signed("write", "", 0), "", 200, ""},
		{"a read signature does not allow a write", "POST", signed("read", "", 0), "", 401, ""},
		{"a signature for another user is 401", "GET", func() url.Values { q := signed("read", "", 0); q.Set("username", "root"); return q }(), "", 401, ""},
		{"an unexpired signature lets a read in", "GET", signed("read", "", future), "", 200, ""},
		{"an expired signature is 401", "GET", signed("read", "", past), "", 401, "signature is already expired"},
		{"a tampered expiration is 401", "GET", func() url.Values {
			q := signed("read", "", past)
			q.Set("signature_expiration", strconv.FormatInt(future, 10))
			return q
		}(), "", 401, "invalid signature"},
		{"a read signature used for a write has E2B's invalid signature body", "POST", signed("read", "", 0), "", 401, "invalid signature"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var body io.Reader
			if tt.method == "POST" {
				body = strings.NewReader("data")
			}
			req, _ := http.NewRequest(tt.method, fileURL(srv, tt.query), body)
			if tt.method == "POST" {
				req.Header.Set("Content-Type", "application/octet-stream")
			}
			if tt.header != "" {
				req.Header.Set(files.AccessTokenHeader, tt.header)
			}
			res, out := do(t, req)
			if res.StatusCode != tt.wantStatus {
				t.Fatalf("status = %d (%s), want %d", res.StatusCode, out, tt.wantStatus)
			}
			if tt.wantStatus >= 400 {
				b := errorBody(t, tt.wantStatus, out)
				if !strings.HasPrefix(b.Message, tt.wantMsg) {
					t.Errorf("message = %q, want %q", b.Message, tt.wantMsg)
				}
				// A signed URL's errors have E2B's exact body; the request id is in the header.
				if strings.Contains(tt.name, "signature") && tt.wantMsg != "" {
					want := fmt.Sprintf(`{"code":401,"message":%q}`, tt.wantMsg)
					if got := strings.TrimSpace(string(out)); got != want {
						t.Errorf("body = %s, want %s", got, want)
					}
					if res.Header.Get("X-Request-Id") == "" {
						t.Error("no X-Request-Id header")
					}
				}
			}
		})
	}
}

// TestSignMatchesTheSDK pins the signature to values computed outside Go (sha256sum | base64),
// the way e2b's JS SDK makes them:
// "v1_" + base64(sha256("<path>:<op>:<user>:<token>[:<exp>]")) with the padding removed.
func TestSignMatchesTheSDK(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                  string
		path, op, user, token string
		exp                   int64
		want                  string
	}{
		{"without expiration", "/home/user/a.txt", "read", "", "tok", 0, "v1_Zkbb3914oLJLvMBzCAHQhm2ydBLxbSx2eQUR/kLdvIY"},
		{"with expiration", "/home/user/a.txt", "write", "user", "tok", 1700000000, "v1_x09R0+VxB2mRzkxWcRyFCpiJmFv0okUrtgQ6q12G0jM"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := files.Sign(tt.path, tt.op, tt.user, tt.token, tt.exp); got != tt.want {
				t.Errorf("Sign = %q, want %q", got, tt.want)
			}
		})
	}
}
