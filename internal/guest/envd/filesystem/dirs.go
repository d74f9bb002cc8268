package filesystem

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/cove-dev/cove/internal/guest/envd/identity"
)

// MkdirAll creates dir and any missing parents with mode 0755, and gives the directories it
// created to u when envd runs as root and u is another account. It reports whether dir itself
// was created; an existing directory is not an error. Errors are wrapped with OSError.
func MkdirAll(dir string, u *identity.User) (created bool, err error) {
	// Collect the missing components from dir upwards, then create them top down, so each
	// one can be chowned right after it is made.
	var missing []string
	for p := dir; ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err == nil {
			if !fi.IsDir() {
				return false, OSError("mkdir", p, &fs.PathError{Op: "mkdir", Path: p, Err: errNotDir})
			}
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return false, OSError("mkdir", p, err)
		}
		missing = append(missing, p)
		if parent := filepath.Dir(p); parent == p {
			break
		}
	}
	for i := len(missing) - 1; i >= 0; i-- {
		p := missing[i]
		if err := os.Mkdir(p, 0o755); err != nil {
			// Someone else made it meanwhile: fine for a parent, and for dir it only
			// means we did not create it.
			if errors.Is(err, fs.ErrExist) {
				if fi, serr := os.Stat(p); serr == nil && fi.IsDir() {
					continue
				}
			}
			return false, OSError("mkdir", p, err)
		}
		if err := Chown(p, u); err != nil {
			return false, err
		}
		if i == 0 {
			created = true
		}
	}
	return created, nil
}

// Chown gives path (not a symlink's target) to u when envd runs as root and u is another
// account; otherwise it does nothing, since a non-root envd only ever acts as itself.
func Chown(path string, u *identity.User) error {
	if u == nil || os.Geteuid() != 0 || u.IsSelf() {
		return nil
	}
	if err := os.Lchown(path, u.UID, u.GID); err != nil {
		return OSError("chown", path, err)
	}
	return nil
}
