package buildctx_test

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/cove-dev/cove/sdk/buildctx"
)

// A build context holding a symlink to a directory outside it: the outside must never be
// packed, whichever way a COPY source names it.
func TestArchiveContextNeverFollowsASymlinkOutOfTheContext(t *testing.T) {
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("host secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctxDir := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(ctxDir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ctxDir, "app.txt"), []byte("app"), 0o644); err != nil {
		t.Fatal(err)
	}

	t.Run("a source through the symlinked directory is refused", func(t *testing.T) {
		for _, src := range []string{"link/secret", "link/."} {
			var buf bytes.Buffer
			_, err := buildctx.ArchiveContext(ctxDir, src, "/dst/", &buf)
			if src == "link/." {
				// Cleaned to "link": the symlink itself, packed as one.
				if err != nil {
					t.Fatalf("COPY %s: %v", src, err)
				}
				continue
			}
			if err == nil {
				t.Fatalf("COPY %s packed a file from outside the context: %v", src, entries(t, &buf))
			}
			if !errors.Is(err, buildctx.ErrInvalid) {
				t.Errorf("COPY %s: %v, want ErrInvalid", src, err)
			}
		}
	})
	t.Run("the context packs the symlink as a symlink", func(t *testing.T) {
		var buf bytes.Buffer
		if _, err := buildctx.ArchiveContext(ctxDir, ".", "/dst/", &buf); err != nil {
			t.Fatal(err)
		}
		got := entries(t, &buf)
		if h, ok := got["link"]; !ok || h.Typeflag != tar.TypeSymlink || h.Linkname != outside {
			t.Errorf("link packed as %+v, want a symlink to %s", h, outside)
		}
		for name := range got {
			if filepath.Base(name) == "secret" {
				t.Errorf("the archive holds %s from outside the context", name)
			}
		}
		if _, ok := got["app.txt"]; !ok {
			t.Errorf("app.txt missing from %v", got)
		}
	})
}

func entries(t *testing.T, r io.Reader) map[string]*tar.Header {
	t.Helper()
	out := map[string]*tar.Header{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out[h.Name] = h
	}
}
