package api_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cove-dev/cove/internal/builder/template"
	"github.com/cove-dev/cove/internal/builder/template/build"
	"github.com/cove-dev/cove/internal/control/api"
	"github.com/cove-dev/cove/internal/store/sqlite"
)

// E2B's upload-link endpoint answers 201 whether or not the files are there yet (present
// says which); its Python SDK takes any other status for "Failed to get file upload link".
func TestUploadLinkAlwaysAnswers201(t *testing.T) {
	dir := t.TempDir()
	db, err := sqlite.Open(context.Background(), filepath.Join(dir, "cove.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ts, err := template.OpenAt(context.Background(), dir+"/templates", db)
	if err != nil {
		t.Fatal(err)
	}
	builds, err := build.OpenBuilds(context.Background(), build.New(ts, nil), db, dir, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(builds.Close)
	e := &env{fake: newFake(), logs: &logBuffer{}}
	srv := httptest.NewServer(api.New(api.Config{Sandboxes: e.fake, Keys: fakeKeys{}, Builds: builds,
		Logger: slog.New(slog.NewJSONHandler(e.logs, nil))}))
	t.Cleanup(srv.Close)
	e.url = srv.URL

	hash := strings.Repeat("ab", 32)
	link := func() (int, map[string]any) {
		res := e.do(t, "GET", "/templates/tpl/files/"+hash, "")
		return res.status, res.json(t)
	}
	var archive bytes.Buffer
	tw := tar.NewWriter(&archive)
	tw.WriteHeader(&tar.Header{Name: "files.txt", Mode: 0o644, Size: 6, Typeflag: tar.TypeReg})
	tw.Write([]byte("files\n"))
	tw.Close()
	put := func(body []byte, digest string) (int, string) {
		t.Helper()
		status, l := link()
		if status != http.StatusCreated || l["present"] != false || l["url"] == "" {
			t.Fatalf("before the upload: %d %v, want 201 with present false and a url", status, l)
		}
		req, err := http.NewRequest("PUT", l["url"].(string), bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if digest != "" {
			req.Header.Set("Content-Digest", digest)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		msg, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(msg)
	}
	digest := func(b []byte) string {
		sum := sha256.Sum256(b)
		return "sha-256=:" + base64.StdEncoding.EncodeToString(sum[:]) + ":"
	}
	for _, tt := range []struct {
		name, digest string
		body         []byte
		want         string
	}{
		{"an upload cut short is a 400 and not kept", "", archive.Bytes()[:700], "whole tar"},
		{"an upload whose Content-Digest differs is a 400 and not kept", digest([]byte("other")), archive.Bytes(), "Content-Digest"},
		{"a Content-Digest without a sha-256 is a 400 naming it", "md5=:AAAA:", archive.Bytes(), "Content-Digest"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if status, msg := put(tt.body, tt.digest); status != http.StatusBadRequest || !strings.Contains(msg, tt.want) {
				t.Errorf("upload: %d %s; want 400 naming %q", status, msg, tt.want)
			}
		})
	}
	if status, msg := put(archive.Bytes(), digest(archive.Bytes())); status != http.StatusOK {
		t.Fatalf("upload: %d %s", status, msg)
	}
	status, again := link()
	if status != http.StatusCreated || again["present"] != true {
		b, _ := json.Marshal(again)
		t.Fatalf("after the upload: %d %s, want 201 with present true", status, b)
	}
}
