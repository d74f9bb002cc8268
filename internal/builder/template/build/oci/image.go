package oci

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Credentials log in to a registry (E2B's fromImage(image, {username, password})); the zero
// value pulls anonymously.
type Credentials struct {
	Username, Password string
}

// Platform is the platform images are pulled for: the one sandboxes run on.
var Platform = v1.Platform{OS: "linux", Architecture: "amd64"}

// Pull fetches the image ref from its registry, connecting only where guard allows.
// Registries on loopback are reached over plain HTTP, others over HTTPS.
func Pull(ctx context.Context, ref string, cred Credentials, guard Guard) (v1.Image, name.Reference, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return nil, nil, fmt.Errorf("image %q: %w", ref, err)
	}
	auth := authn.Anonymous
	if cred.Username != "" || cred.Password != "" {
		auth = authn.FromConfig(authn.AuthConfig{Username: cred.Username, Password: cred.Password})
	}
	img, err := remote.Image(r, remote.WithContext(ctx), remote.WithAuth(auth), remote.WithPlatform(Platform), remote.WithTransport(guard.Transport()))
	if err != nil {
		return nil, nil, fmt.Errorf("pull %s: %w", r, err)
	}
	return img, r, nil
}

// Load reads the image in an archive: a `docker save` tarball (its first image) or an OCI
// image layout packed as a tar (its first manifest for Platform, or its first).
func Load(archive string) (v1.Image, error) {
	isLayout, err := hasEntry(archive, "index.json")
	if err != nil {
		return nil, err
	}
	if !isLayout {
		img, err := tarball.ImageFromPath(archive, nil)
		if err != nil {
			return nil, fmt.Errorf("load %s: %w", archive, err)
		}
		return img, nil
	}
	dir, err := os.MkdirTemp("", "cove-oci-layout-")
	if err != nil {
		return nil, err
	}
	// The image reads its blobs lazily from dir: it is removed with the process's temp files
	// by the caller (Cleanup), after the image is unpacked.
	if err := extract(archive, dir); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("load %s: %w", archive, err)
	}
	m, err := idx.IndexManifest()
	if err != nil || len(m.Manifests) == 0 {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("load %s: no image in the layout's index: %v", archive, err)
	}
	pick := m.Manifests[0]
	for _, d := range m.Manifests {
		if d.Platform != nil && d.Platform.Satisfies(Platform) {
			pick = d
			break
		}
	}
	img, err := idx.Image(pick.Digest)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("load %s: %w", archive, err)
	}
	return &layoutImage{Image: img, dir: dir}, nil
}

// layoutImage is an image read from an extracted OCI layout; Close removes the layout.
type layoutImage struct {
	v1.Image
	dir string
}

// Close removes the extracted layout behind the image.
func (l *layoutImage) Close() error { return os.RemoveAll(l.dir) }

// Close releases what Load keeps on disk for img, if anything.
func Close(img v1.Image) error {
	if c, ok := img.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

func hasEntry(archive, entry string) (bool, error) {
	f, err := os.Open(archive)
	if err != nil {
		return false, err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("read %s: %w", archive, err)
		}
		if path.Clean(hdr.Name) == entry {
			return true, nil
		}
	}
}

// extract unpacks the regular files and directories of a tar into dir, refusing paths that
// would leave it.
func extract(archive, dir string) error {
	f, err := os.Open(archive)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", archive, err)
		}
		name := path.Clean(hdr.Name)
		if name == ".." || strings.HasPrefix(name, "../") || path.IsAbs(name) {
			return fmt.Errorf("read %s: entry %q leaves the archive", archive, hdr.Name)
		}
		target := filepath.Join(dir, name)
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
		case tar.TypeReg: // the reader reports the old TypeRegA as TypeReg
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
			out, err := os.Create(target)
			if err != nil {
				return err
			}
			_, err = io.Copy(out, tr)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		}
	}
}

// Config is what an image's configuration says a container runs with.
type Config struct {
	Env        map[string]string
	User       string
	WorkingDir string
	Cmd        []string // Entrypoint then Cmd
}

// ImageConfig reads img's configuration.
func ImageConfig(img v1.Image) (Config, error) {
	cf, err := img.ConfigFile()
	if err != nil {
		return Config{}, fmt.Errorf("image config: %w", err)
	}
	c := Config{Env: map[string]string{}, User: cf.Config.User, WorkingDir: cf.Config.WorkingDir,
		Cmd: append(append([]string(nil), cf.Config.Entrypoint...), cf.Config.Cmd...)}
	for _, e := range cf.Config.Env {
		if k, v, ok := strings.Cut(e, "="); ok {
			c.Env[k] = v
		}
	}
	return c, nil
}
