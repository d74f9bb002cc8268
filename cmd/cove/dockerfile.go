package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/spf13/cobra"

	"github.com/cove-dev/cove/internal/builder/template/build"
	"github.com/cove-dev/cove/internal/builder/template/build/dockerfile"
	"github.com/cove-dev/cove/internal/builder/template/build/oci"
)

// importImageCmd makes a template from a `docker save` or OCI layout archive.
func importImageCmd(open func(ctx context.Context) (*build.Builder, error)) *cobra.Command {
	return &cobra.Command{
		Use:   "import NAME IMAGE.tar",
		Short: "Make a template from an image archive (docker save, or an OCI layout as a tar)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ts, err := open(cmd.Context())
			if err != nil {
				return err
			}
			img, err := oci.Load(args[1])
			if err != nil {
				return err
			}
			defer oci.Close(img)
			t, err := ts.ImportImage(cmd.Context(), args[0], img, filepath.Base(args[1]), os.Stdout)
			if err != nil {
				return err
			}
			fmt.Printf("template %s ready: %d MiB from %s\n", t.Name, t.SizeBytes>>20, t.Image)
			return nil
		},
	}
}

// dockerfileSpec turns a Dockerfile and its build context into spec's steps: the COPY
// sources are packed into the store's upload directory, FROM names the template to build on.
func dockerfileSpec(ctx context.Context, ts *build.Builder, spec build.Spec, file, ctxDir string, buildArgs []string) (build.Spec, error) {
	args := map[string]string{}
	for _, a := range buildArgs {
		k, v, ok := strings.Cut(a, "=")
		if !ok || k == "" {
			return spec, fmt.Errorf("--build-arg %q: want KEY=VALUE", a)
		}
		args[k] = v
	}
	f, err := os.Open(file)
	if err != nil {
		return spec, err
	}
	defer f.Close()
	def, err := dockerfile.Parse(f, args)
	if err != nil {
		return spec, fmt.Errorf("%s: %w", file, err)
	}
	if spec.From != "" || len(spec.Run) > 0 {
		return spec, fmt.Errorf("-f takes the base and the steps from the Dockerfile: drop --from and --run")
	}
	if def.Bootstrap != nil {
		spec.Bootstrap = def.Bootstrap
	} else if _, err := ts.Get(def.From); err != nil {
		// Not a template: an image, pulled with $COVE_REGISTRY_USERNAME/PASSWORD when set. The
		// operator names the registry on the host, so it is allowed wherever it is; a redirect
		// to another host is checked as a server's pulls are.
		var guard oci.Guard
		if ref, perr := name.ParseReference(def.From); perr == nil {
			guard.Registries = []string{ref.Context().RegistryStr()}
		}
		img, ierr := ts.EnsureImage(ctx, def.From, oci.Credentials{Username: os.Getenv("COVE_REGISTRY_USERNAME"),
			Password: os.Getenv("COVE_REGISTRY_PASSWORD")}, guard, os.Stdout)
		if ierr != nil {
			return spec, fmt.Errorf("%s: FROM %s: neither a Cove template (%v) nor an image we could pull: %w", file, def.From, err, ierr)
		}
		def.From = img.Name
	}
	uploads, err := ts.HostUploads()
	if err != nil {
		return spec, err
	}
	if err := def.Pack(ctxDir, uploads); err != nil {
		return spec, fmt.Errorf("%s: %w", file, err)
	}
	spec.From, spec.Steps, spec.StartCmd, spec.Files = def.From, def.Steps, def.StartCmd, build.DirSource(uploads)
	return spec, nil
}
