package template

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"
)

// Bootstrap is the root step of a template built from nothing (the base's BOOTSTRAP line):
// Debian's minbase of Suite with the packages Include, debootstrapped from the host's apt
// source (or a mirror the build names), then slimmed (no apt lists, caches, docs, man pages
// or locales). Its result is a root template of its own, named by the step's content
// (RootName), so every build with the same line reuses it and the steps above it are
// ordinary cached layers.
type Bootstrap struct {
	Suite   string   `json:"suite"`
	Include []string `json:"include,omitempty"`
}

// bootstrapRecipe versions what the step does beyond debootstrap's arguments (slim):
// bump it when that changes, so that RootName changes and roots are bootstrapped anew.
const bootstrapRecipe = 1

var (
	validSuite   = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z][a-z0-9-]{0,31}$`) })
	validPackage = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9][a-z0-9.+-]{0,127}$`) })
)

// Validate checks the suite and package names (debootstrap's arguments).
func (b Bootstrap) Validate() error {
	if !validSuite().MatchString(b.Suite) {
		return fmt.Errorf("%w: BOOTSTRAP: suite %q is not a Debian suite name", ErrInvalid, b.Suite)
	}
	for _, p := range b.Include {
		if !validPackage().MatchString(p) {
			return fmt.Errorf("%w: BOOTSTRAP: %q is not a Debian package name", ErrInvalid, p)
		}
	}
	return nil
}

func (b Bootstrap) args() []string { return append([]string{b.Suite}, b.Include...) }

// String is the step as a build log line shows it.
func (b Bootstrap) String() string { return "BOOTSTRAP " + strings.Join(b.args(), " ") }

// Key is the cache key of the step: its suite, its packages in order, and the recipe.
func (b Bootstrap) Key() string {
	h := sha256.New()
	fmt.Fprintf(h, "cove-bootstrap-v%d\x00%s\x00", bootstrapRecipe, b.Suite)
	for _, p := range b.Include {
		fmt.Fprintf(h, "%s\x00", p)
	}
	return hex.EncodeToString(h.Sum(nil))[:32]
}

// RootName is the root template the step makes: debian-<suite>-<key prefix>.
func (b Bootstrap) RootName() string { return "debian-" + b.Suite + "-" + b.Key()[:12] }

// bootstrapRoot returns the root template of b, bootstrapping it the first time (with its
// output in out). A root is never rebuilt in place (templates stack layers on it); a changed
// line names another root.
func (s *Store) bootstrapRoot(ctx context.Context, b Bootstrap, mirror string, out *lineWriter) (*Template, StepResult, error) {
	begun := time.Now()
	name := b.RootName()
	res := StepResult{Step: b.String(), Layer: name}
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
			return nil, res, fmt.Errorf("%w: root %s: a team's template has that name, not the bootstrap of %q; remove it", ErrExists, name, b.String())
		}
		out.Printf("    cached: root %s", name)
		res.Cached, res.Seconds = true, time.Since(begun).Seconds()
		return t, res, nil
	}
	root := &Template{Name: name, Suite: b.Suite, Include: b.Include, Key: b.Key(), Bootstrap: &b}
	t, err := s.importRoot(ctx, root, logWriter(out.line), func(rootfs string, out *lineWriter) error {
		return bootstrap(ctx, rootfs, b, mirror, out)
	})
	if errors.Is(err, ErrExists) {
		t, err = s.Get(name) // another process bootstrapped it first
		if err == nil && !bootstrapped(t, b) {
			t, err = nil, fmt.Errorf("%w: root %s: a team's template has that name, not the bootstrap of %q; remove it", ErrExists, name, b.String())
		}
	}
	res.Seconds = time.Since(begun).Seconds()
	return t, res, err
}

// bootstrapped reports whether t may stand for the root of b: a root made on the host (the
// bootstrap, or one an operator imported under its name), never a team's API build.
func bootstrapped(t *Template, b Bootstrap) bool {
	return t.Root == "" && t.TeamID == "" && (t.Bootstrap == nil || t.Key == b.Key())
}

// bootstrap debootstraps b's minbase Debian into rootfs and slims it.
func bootstrap(ctx context.Context, rootfs string, b Bootstrap, mirror string, out *lineWriter) error {
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

// gcRoots removes the bootstrapped roots no template is built on and no overlay on this host
// stacks (a sandbox or a build running on one): what a changed BOOTSTRAP line left behind.
func (s *Store) gcRoots() (freed int64, err error) {
	all, err := s.List()
	if err != nil {
		return 0, err
	}
	used := map[string]bool{}
	for _, t := range all {
		used[t.Root] = true
	}
	mounted := mountedLowers()
	for _, t := range all {
		if t.Bootstrap == nil || t.Root != "" || used[t.Name] || mounted[t.Rootfs] {
			continue
		}
		if err := s.Remove(t.Name); err != nil {
			return freed, err
		}
		freed += t.SizeBytes
	}
	return freed, nil
}
