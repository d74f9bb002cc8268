package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cove-dev/cove/internal/template"
	"github.com/cove-dev/cove/internal/template/dockerfile"
)

// dockerfileSpec turns a Dockerfile and its build context into spec's steps: the COPY
// sources are packed into the store's upload directory, FROM names the template to build on.
func dockerfileSpec(ts *template.Store, spec template.Spec, file, ctxDir string, buildArgs []string) (template.Spec, error) {
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
	if _, err := ts.Get(def.From); err != nil {
		return spec, fmt.Errorf("%s: FROM %s: no Cove template of that name (OCI images are not supported yet): %w", file, def.From, err)
	}
	uploads := filepath.Join(ts.Dir(), ".uploads")
	if err := os.MkdirAll(uploads, 0o755); err != nil {
		return spec, err
	}
	if err := def.Pack(ctxDir, uploads); err != nil {
		return spec, fmt.Errorf("%s: %w", file, err)
	}
	spec.From, spec.Steps, spec.StartCmd, spec.Files = def.From, def.Steps, def.StartCmd, template.DirSource(uploads)
	return spec, nil
}
