package build_test

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cove-dev/cove/internal/builder/template"
	"github.com/cove-dev/cove/internal/builder/template/build"
)

func TestAnUploadIsKeptOnlyWhole(t *testing.T) {
	store, err := build.OpenDir(t, filepath.Join(t.TempDir(), "templates"), nil)
	if err != nil {
		t.Fatal(err)
	}
	builds, err := openBuilds(t, store, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctxDir := t.TempDir()
	_, whole := archiveFile(t, ctxDir, "big.txt")
	// Enough entries that cuts land inside a header, inside data and between entries.
	var tarball bytes.Buffer
	for _, name := range []string{"a.txt", "b.txt", "c.txt"} {
		_, one := archiveFile(t, ctxDir, name)
		tarball.Write(one.Bytes()[:len(one.Bytes())-1024]) // without its end marker
	}
	tarball.Write(make([]byte, 1024))
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(tarball.Bytes())
	zw.Close()
	sum := func(b []byte) []byte { s := sha256.Sum256(b); return s[:] }
	hash := strings.Repeat("ab", 32)

	for _, tt := range []struct {
		name   string
		body   []byte
		digest []byte
		want   string // "" accepted
	}{
		{"a whole tar is kept", tarball.Bytes(), nil, ""},
		{"a whole gzipped tar is kept", gz.Bytes(), nil, ""},
		{"a body matching its Content-Digest is kept", whole.Bytes(), sum(whole.Bytes()), ""},
		{"a body not matching its Content-Digest is refused", whole.Bytes(), sum([]byte("other")), "Content-Digest"},
		{"a digest that is no sha-256 is refused", whole.Bytes(), []byte("short"), "not a sha-256"},
		{"an empty body is refused", nil, nil, "end-of-archive"},
		{"a tar cut inside a header is refused", tarball.Bytes()[:300], nil, "whole tar"},
		{"a tar cut inside a file's data is refused", tarball.Bytes()[:700], nil, "whole tar"},
		{"a tar cut between two entries is refused", tarball.Bytes()[:1024], nil, "end-of-archive"},
		{"a gzipped tar cut short is refused", gz.Bytes()[:len(gz.Bytes())-6], nil, "whole tar"},
		{"bytes that are no archive are refused", bytes.Repeat([]byte("not a tar "), 200), nil, "whole tar"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			team := "team-" + strings.ReplaceAll(tt.name, " ", "-")
			err := builds.Upload(team, hash, bytes.NewReader(tt.body), 1<<20, tt.digest)
			if tt.want == "" {
				if err != nil || !builds.HasUpload(team, hash) {
					t.Fatalf("upload: %v, kept %v", err, builds.HasUpload(team, hash))
				}
				return
			}
			if !errors.Is(err, template.ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("upload: %v; want invalid naming %q", err, tt.want)
			}
			if builds.HasUpload(team, hash) {
				t.Error("the refused upload was kept")
			}
		})
	}
}
