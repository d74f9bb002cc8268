package build

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cove-dev/cove/internal/builder/template"
)

// bootstrapRoot returns the root template of b, bootstrapping it the first time (with its
// output in out). A root is never rebuilt in place (templates stack layers on it); a changed
// line names another root.
func (s *Builder) bootstrapRoot(ctx context.Context, b template.Bootstrap, mirror string, out *lineWriter) (*template.Template, template.StepResult, error) {
	begun := time.Now()
	name := b.RootName()
	res := template.StepResult{Step: b.String(), Layer: name}
	out.Printf("==> %s", b)
	release, err := s.lockName(ctx, name)
	if err != nil {
		return nil, res, err
	}
	defer release()
	if t, err := s.Get(name); err == nil {
		if !bootstrapped(t, b) {
			// A template someone else made under the name (a team's API build, say): never
			// taken for the root every base would stand on.
			return nil, res, fmt.Errorf("%w: root %s: a team's template has that name, not the bootstrap of %q; remove it", template.ErrExists, name, b.String())
		}
		out.Printf("    cached: root %s", name)
		res.Cached, res.Seconds = true, time.Since(begun).Seconds()
		return t, res, nil
	}
	root := &template.Template{Name: name, Suite: b.Suite, Include: b.Include, Key: b.Key(), Bootstrap: &b}
	t, err := s.importRoot(ctx, root, logWriter(out.line), func(rootfs string, out *lineWriter) error {
		return bootstrap(ctx, rootfs, b, mirror, out)
	})
	if errors.Is(err, template.ErrExists) {
		t, err = s.Get(name) // another process bootstrapped it first
		if err == nil && !bootstrapped(t, b) {
			t, err = nil, fmt.Errorf("%w: root %s: a team's template has that name, not the bootstrap of %q; remove it", template.ErrExists, name, b.String())
		}
	}
	res.Seconds = time.Since(begun).Seconds()
	return t, res, err
}

// bootstrapped reports whether t may stand for the root of b: a root made on the host (the
// bootstrap, or one an operator imported under its name), never a team's API build.
func bootstrapped(t *template.Template, b template.Bootstrap) bool {
	return t.Root == "" && t.TeamID == "" && (t.Bootstrap == nil || t.Key == b.Key())
}

// bootstrap debootstraps b's minbase Debian into rootfs and slims it.
func bootstrap(ctx context.Context, rootfs string, b template.Bootstrap, mirror string, out *lineWriter) error {
	out.Printf("==> host packages: debootstrap")
	if err := EnsureHostPackages(ctx, "debootstrap"); err != nil {
		return err
	}
	if mirror == "" {
		m, err := AptMirror(b.Suite)
		if err != nil {
			return err
		}
		mirror = m
	}
	out.Printf("==> debootstrap %s (minbase + %s)", b.Suite, strings.Join(b.Include, ","))
	args := []string{"--variant=minbase"}
	if len(b.Include) > 0 {
		args = append(args, "--include="+strings.Join(b.Include, ","))
	}
	args = append(args, b.Suite, rootfs, mirror)
	if err := command(ctx, out, "debootstrap", args...); err != nil {
		return fmt.Errorf("debootstrap: %w", err)
	}
	out.Printf("==> slim: drop apt lists, caches, docs, man pages, locales")
	if err := slim(rootfs); err != nil {
		return fmt.Errorf("slim: %w", err)
	}
	return nil
}
