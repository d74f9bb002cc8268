package build

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/cove-dev/cove/internal/builder/template"
	"github.com/cove-dev/cove/internal/builder/template/build/oci"
)

// ImportImage makes the root template name from an OCI or Docker image: its layers unpacked
// into a rootfs, its configuration (env, user, working dir) kept. source names where the
// image came from, for the record.
func (s *Builder) ImportImage(ctx context.Context, name string, img v1.Image, source string, progress io.Writer) (*template.Template, error) {
	if err := template.ValidName(name); err != nil {
		return nil, fmt.Errorf("import image %s: %w", source, err)
	}
	return s.importImage(ctx, name, img, source, progress)
}

// importImage is ImportImage for a name of the caller's or of the store's own.
func (s *Builder) importImage(ctx context.Context, name string, img v1.Image, source string, progress io.Writer) (*template.Template, error) {
	digest, err := img.Digest()
	if err != nil {
		return nil, fmt.Errorf("import image %s: %w", source, err)
	}
	cfg, err := oci.ImageConfig(img)
	if err != nil {
		return nil, fmt.Errorf("import image %s: %w", source, err)
	}
	t := &template.Template{Name: name, Image: source + "@" + digest.String(), User: cfg.User, Workdir: cfg.WorkingDir}
	if len(cfg.Env) > 0 {
		t.Env = cfg.Env
	}
	return s.importRoot(ctx, t, progress, func(rootfs string, out *lineWriter) error {
		out.Printf("==> unpack %s (%s)", source, digest)
		if err := os.Mkdir(rootfs, 0o755); err != nil { // below the store's 0700
			return err
		}
		return oci.Unpack(img, rootfs)
	})
}

// imageTemplateName is the root template an image with digest becomes when a build starts
// from it: one per digest, shared by every template built on that image. It is the store's
// own name (InternalName), the full digest: no template a caller names can stand in for it.
func imageTemplateName(digest v1.Hash) string {
	return template.ImageRoot(digest.Hex)
}

// EnsureImage pulls the image ref, connecting only where guard allows, and returns the root
// template holding it, importing it the first time its digest is seen.
func (s *Builder) EnsureImage(ctx context.Context, ref string, cred oci.Credentials, guard oci.Guard, out io.Writer) (*template.Template, error) {
	if out == nil {
		out = io.Discard
	}
	img, r, err := oci.Pull(ctx, ref, cred, guard)
	if err != nil {
		return nil, err
	}
	digest, err := img.Digest()
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", ref, err)
	}
	name := imageTemplateName(digest)
	if t, err := s.Lookup(name); err == nil {
		fmt.Fprintf(out, "==> image %s: %s, cached as %s\n", ref, digest, name)
		return t, nil
	}
	fmt.Fprintf(out, "==> pull %s (%s)\n", r, digest)
	t, err := s.importImage(ctx, name, img, r.String(), out)
	if errors.Is(err, template.ErrExists) {
		return s.Lookup(name) // a concurrent build imported it first
	}
	return t, err
}
