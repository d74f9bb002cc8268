package template

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
	"sync"
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

// Args are the BOOTSTRAP line's arguments: the suite, then the packages it includes.
func (b Bootstrap) Args() []string { return append([]string{b.Suite}, b.Include...) }

// String is the step as a build log line shows it.
func (b Bootstrap) String() string { return "BOOTSTRAP " + strings.Join(b.Args(), " ") }

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

// FreeRoots removes the bootstrapped roots no template is built on and no overlay on this host
// stacks (a sandbox or a build running on one): what a changed BOOTSTRAP line left behind.
func (s *Store) FreeRoots() (freed int64, err error) {
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
