package files

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime/multipart"
	"os"
	"path/filepath"

	"github.com/cove-dev/cove/internal/envd/fault"
	"github.com/cove-dev/cove/internal/envd/filesystem"
	"github.com/cove-dev/cove/internal/envd/identity"
)

func multipartReader(body io.Reader, boundary string) *multipart.Reader {
	return multipart.NewReader(body, boundary)
}

// writeFile streams r into target: into a temporary file in the target's directory first,
// renamed over the target once the body is complete, so a reader never sees half a file and
// a failed upload leaves the old one. Missing parents are created for u. A symlink at target
// is written through, as opening it would; an existing file keeps its permission bits.
//
// The file gets exactly the metadata md (user.e2b.* attributes), set on the temporary file
// before the rename: the new inode starts without attributes, so earlier metadata is
// replaced, and a failure leaves the old file as it was. stored is false when the file
// system keeps no user attributes; the file is written anyway.
func writeFile(target string, u *identity.User, r io.Reader, md map[string]string, heavy bool) (n int64, stored bool, err error) {
	dest := target
	mode := fs.FileMode(0o644)
	fi, err := os.Lstat(target)
	switch {
	case err == nil && fi.Mode()&fs.ModeSymlink != 0:
		if resolved, rerr := filepath.EvalSymlinks(target); rerr == nil {
			dest = resolved
			if fi, err = os.Stat(resolved); err == nil {
				if fi.IsDir() {
					return 0, false, fmt.Errorf("upload %s: %w: it is a directory", target, fault.ErrInvalid)
				}
				mode = fi.Mode().Perm()
			}
		}
	case err == nil && fi.IsDir():
		return 0, false, fmt.Errorf("upload %s: %w: it is a directory", target, fault.ErrInvalid)
	case err == nil:
		mode = fi.Mode().Perm()
	case !errors.Is(err, fs.ErrNotExist):
		return 0, false, filesystem.OSError("upload", target, err)
	}

	dir := filepath.Dir(dest)
	if _, err := filesystem.MkdirAll(dir, u); err != nil {
		return 0, false, err
	}
	tmp, err := os.CreateTemp(dir, ".cove-upload-*")
	if err != nil {
		return 0, false, filesystem.OSError("upload", dest, err)
	}
	done := false
	defer func() {
		if !done {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()

	src := &errReader{r: r}
	if heavy {
		n, err = politeCopy(tmp, src) // decompressing
	} else {
		n, err = io.Copy(tmp, src)
	}
	if err != nil {
		if src.err != nil {
			return n, false, fmt.Errorf("upload %s: %w: reading the request body failed after %d bytes: %v", target, fault.ErrInvalid, n, src.err)
		}
		return n, false, filesystem.OSError("write", dest, err)
	}
	stored = true
	if len(md) > 0 {
		if err := filesystem.WriteMetadata(tmp, md); errors.Is(err, filesystem.ErrXattrUnsupported) {
			stored = false
		} else if err != nil {
			return n, false, err
		}
	}
	if err := tmp.Chmod(mode); err != nil {
		return n, false, filesystem.OSError("chmod", dest, err)
	}
	if err := filesystem.Chown(tmp.Name(), u); err != nil {
		return n, false, err
	}
	if err := tmp.Close(); err != nil {
		return n, false, filesystem.OSError("write", dest, err)
	}
	if err := os.Rename(tmp.Name(), dest); err != nil {
		return n, false, filesystem.OSError("upload", dest, err)
	}
	done = true
	return n, stored, nil
}

// errReader remembers the error of the reader it wraps, so that a failed copy can tell a
// broken request body (the client's fault) from a failed write (the disk's).
type errReader struct {
	r   io.Reader
	err error
}

func (e *errReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		e.err = err
	}
	return n, err
}
