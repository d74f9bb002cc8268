package files

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime/multipart"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/internal/envd/fault"
	"github.com/cove-dev/cove/internal/envd/filesystem"
	"github.com/cove-dev/cove/internal/envd/identity"
)

func multipartReader(body io.Reader, boundary string) *multipart.Reader {
	return multipart.NewReader(body, boundary)
}

// writeFile streams r into target: into an unnamed (O_TMPFILE) file in the target's
// directory first, linked in as the target once the body is complete, so a reader never
// sees half a file, a failed upload leaves the old one, and a watcher on the directory sees
// no name but the target's. A file system without O_TMPFILE gets a hidden temporary file
// renamed over the target instead. Missing parents are created for u. A symlink at target
// is written through, as opening it would; an existing file keeps its permission bits.
//
// The file gets exactly the metadata md (user.e2b.* attributes), set on the temporary file
// before it is linked: the new inode starts without attributes, so earlier metadata is
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
	tmp, named, err := createUnnamed(dir)
	if err != nil {
		return 0, false, filesystem.OSError("upload", dest, err)
	}
	done := false
	defer func() {
		if !done {
			_ = tmp.Close()
			if named {
				_ = os.Remove(tmp.Name())
			}
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
	if u != nil && os.Geteuid() == 0 && !u.IsSelf() {
		if err := tmp.Chown(u.UID, u.GID); err != nil {
			return n, false, filesystem.OSError("chown", dest, err)
		}
	}
	if !named {
		err = linkInto(tmp, dest)
	}
	if cerr := tmp.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err == nil && named {
		err = os.Rename(tmp.Name(), dest)
	}
	if err != nil {
		return n, false, filesystem.OSError("upload", dest, err)
	}
	done = true
	return n, stored, nil
}

// createUnnamed opens an unnamed file (O_TMPFILE) on dir's mount, so that no name but the
// target's ever shows in dir. The file is made in the mount's root, not in dir: the kernel
// reports writes to an unnamed file to a watcher of its directory as "#<inode>", so in dir a
// watcher would see that name; a target in the mount's root itself still shows it. named is true when the file system has no O_TMPFILE and the
// file is a hidden temporary one instead.
func createUnnamed(dir string) (f *os.File, named bool, err error) {
	fd, err := unix.Open(mountRoot(dir), unix.O_TMPFILE|unix.O_WRONLY|unix.O_CLOEXEC, 0o600)
	if err == nil {
		return os.NewFile(uintptr(fd), dir), false, nil
	}
	if !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EINVAL) {
		return nil, false, err
	}
	f, err = os.CreateTemp(dir, ".cove-upload-*")
	return f, true, err
}

// linkInto gives the unnamed file f the name dest. linkat does not replace a name, so an
// existing dest is unlinked first and the link tried again: a watcher sees dest deleted and
// created, never another name, and a reader sees the old file, no file for the instant
// between the two calls, or the whole new one.
func linkInto(f *os.File, dest string) error {
	src := fmt.Sprintf("/proc/self/fd/%d", f.Fd())
	var err error
	for range 5 { // another writer may link dest between the unlink and the link
		err = unix.Linkat(unix.AT_FDCWD, src, unix.AT_FDCWD, dest, unix.AT_SYMLINK_FOLLOW)
		if !errors.Is(err, unix.EEXIST) {
			return err
		}
		if err := unix.Unlink(dest); err != nil && !errors.Is(err, unix.ENOENT) {
			return err
		}
	}
	return err
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

// mountRoot returns the topmost ancestor of dir on the same mount (by statx mount id), where
// a file can be made and then linked into dir. On any error it returns dir.
func mountRoot(dir string) string {
	id := func(p string) (uint64, bool) {
		var st unix.Statx_t
		if err := unix.Statx(unix.AT_FDCWD, p, 0, unix.STATX_MNT_ID, &st); err != nil || st.Mask&unix.STATX_MNT_ID == 0 {
			return 0, false
		}
		return st.Mnt_id, true
	}
	want, ok := id(dir)
	if !ok {
		return dir
	}
	root := dir
	for {
		parent := filepath.Dir(root)
		if parent == root {
			return root
		}
		if got, ok := id(parent); !ok || got != want {
			return root
		}
		root = parent
	}
}
