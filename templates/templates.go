// Package templates holds the definitions of the templates Cove ships, kept in the
// repository and built by the same builder as every user's template: base/ is the base
// template (a Dockerfile whose first line is Cove's BOOTSTRAP, and the files it copies).
//
// The one idea: the definition's content names it. BaseKey hashes every file of base/, so a
// cache of built bases (the test template store) builds a changed definition afresh, and
// the builder's layer cache rebuilds only the steps from the first changed line on.
package templates

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sync"

	"github.com/cove-dev/cove/internal/builder/template"
	"github.com/cove-dev/cove/internal/builder/template/build"
	"github.com/cove-dev/cove/internal/builder/template/build/dockerfile"
)

//go:embed base
var files embed.FS

// BaseName is the template the base definition builds, unless told otherwise.
const BaseName = "base"

// base is the parsed base definition, read once.
var base = sync.OnceValues(func() (*dockerfile.Definition, error) { return parse(files) })

// parse reads base/Dockerfile of fsys, which must start with BOOTSTRAP.
func parse(fsys fs.FS) (*dockerfile.Definition, error) {
	b, err := fs.ReadFile(fsys, "base/Dockerfile")
	if err != nil {
		return nil, err
	}
	d, err := dockerfile.Parse(bytes.NewReader(b), nil)
	if err != nil {
		return nil, fmt.Errorf("templates/base/Dockerfile: %w", err)
	}
	if d.Bootstrap == nil {
		return nil, fmt.Errorf("templates/base/Dockerfile: the base starts with BOOTSTRAP, not FROM %s", d.From)
	}
	return d, nil
}

// BaseKey names the base definition: its suite and a hash of every file of templates/base
// (path and content). It changes whenever the definition does.
func BaseKey() string { return keyOf(files) }

func keyOf(fsys fs.FS) string {
	h := sha256.New()
	err := fs.WalkDir(fsys, "base", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", p, len(b))
		h.Write(b)
		return nil
	})
	suite := "invalid"
	if d, perr := parse(fsys); perr == nil && err == nil {
		suite = d.Bootstrap.Suite
	}
	return suite + "-" + hex.EncodeToString(h.Sum(nil))[:12]
}

// BaseSpec is the build of the base definition as the template name, by the builder ts:
// the files its COPY lines name are packed into the store's host uploads. mirror is where
// BOOTSTRAP downloads Debian from ("" for the host's apt source).
func BaseSpec(ts *build.Builder, name, mirror string) (build.Spec, error) {
	d, err := base()
	if err != nil {
		return build.Spec{}, err
	}
	def := *d
	def.Steps = append([]template.Step(nil), d.Steps...) // Pack sets the copies' hashes
	ctxDir, err := os.MkdirTemp("", "cove-base-")
	if err != nil {
		return build.Spec{}, err
	}
	defer os.RemoveAll(ctxDir)
	if err := extract(ctxDir); err != nil {
		return build.Spec{}, fmt.Errorf("base definition: %w", err)
	}
	uploads, err := ts.HostUploads()
	if err != nil {
		return build.Spec{}, err
	}
	if err := def.Pack(ctxDir, uploads); err != nil {
		return build.Spec{}, fmt.Errorf("base definition: %w", err)
	}
	return build.Spec{Name: name, Bootstrap: def.Bootstrap, Mirror: mirror, Steps: def.Steps, StartCmd: def.StartCmd,
		Files: build.DirSource(uploads), Key: BaseKey()}, nil
}

// extract writes the files of templates/base into dir, each 0644: the build context of its
// COPY lines (whose hash counts modes, so every machine packs the same).
func extract(dir string) error {
	return fs.WalkDir(files, "base", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := path.Clean(p[len("base"):])
		target := filepath.Join(dir, filepath.FromSlash(rel))
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		b, err := files.ReadFile(p)
		if err != nil {
			return err
		}
		if err := os.WriteFile(target, b, 0o644); err != nil {
			return err
		}
		return os.Chmod(target, 0o644) // whatever the umask
	})
}
