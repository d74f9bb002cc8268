package build

import (
	"context"

	"github.com/cove-dev/cove/internal/builder/hostpkg"
)

// EnsureHostPackages installs the Debian packages among pkgs that the host lacks
// (hostpkg.Ensure).
func EnsureHostPackages(ctx context.Context, pkgs ...string) error {
	return hostpkg.Ensure(ctx, pkgs...)
}
