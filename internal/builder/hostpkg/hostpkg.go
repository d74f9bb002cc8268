// Package hostpkg installs the Debian packages Cove needs on its host (runc, debootstrap,
// busybox-static for tests), with apt-get, at most one apt run at a time.
//
// It imports nothing of Cove's: the runtime, the template store, cove server and test helpers
// all use it without an arrow running back up.
package hostpkg

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
)

// debianPackage matches a Debian package name (Debian Policy 5.6.1), so that nothing that looks
// like an option ever reaches apt-get.
var debianPackage = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]+$`) }) // compiled on first use, not at every start of the binary

var (
	aptMu      sync.Mutex // one dpkg/apt run at a time in this process
	aptUpdated bool       // apt-get update ran successfully in this process
)

// Ensure installs the Debian packages among pkgs that the host lacks. It checks each with
// dpkg, runs apt-get update at most once per process, and installs without recommends. Packages that
// are already installed cost one dpkg-query and no network.
func Ensure(ctx context.Context, pkgs ...string) error {
	for _, p := range pkgs {
		if !debianPackage().MatchString(p) {
			return fmt.Errorf("ensure host packages: %q is not a Debian package name", p)
		}
	}
	aptMu.Lock()
	defer aptMu.Unlock()
	var missing []string
	for _, p := range pkgs {
		if !packageInstalled(ctx, p) {
			missing = append(missing, p)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		return fmt.Errorf("ensure host packages %v: apt-get not found: %w", missing, err)
	}
	if !aptUpdated {
		if out, err := aptGet(ctx, "update"); err != nil {
			return fmt.Errorf("ensure host packages %v: apt-get update: %w: %s", missing, err, tail(out))
		}
		aptUpdated = true
	}
	args := append([]string{"install", "-y", "--no-install-recommends"}, missing...)
	if out, err := aptGet(ctx, args...); err != nil {
		return fmt.Errorf("ensure host packages %v: apt-get install: %w: %s", missing, err, tail(out))
	}
	for _, p := range missing {
		if !packageInstalled(ctx, p) {
			return fmt.Errorf("ensure host packages: %s still not installed after apt-get install", p)
		}
	}
	return nil
}

func packageInstalled(ctx context.Context, pkg string) bool {
	out, err := exec.CommandContext(ctx, "dpkg-query", "-W", "-f=${Status}", pkg).Output()
	return err == nil && strings.TrimSpace(string(out)) == "install ok installed"
}

func aptGet(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "apt-get", append([]string{"-q"}, args...)...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	return cmd.CombinedOutput()
}

// tail returns the last few lines of a command's output, for error messages.
func tail(out []byte) string {
	lines := bytes.Split(bytes.TrimSpace(out), []byte("\n"))
	if len(lines) > 8 {
		lines = lines[len(lines)-8:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
