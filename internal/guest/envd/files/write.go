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

	"github.com/cove-dev/cove/internal/guest/envd/fault"
	"github.com/cove-dev/cove/internal/guest/envd/filesystem"
	"github.com/cove-dev/cove/internal/guest/envd/identity"
)

func multipartReader(body io.Reader, boundary string) *multipart.Reader {
	return multipart.NewReader(body, boundary)
}

// writeFile writes the body r to target in place, as E2B's envd does: an existing file keeps
// its inode (owner, mode, hard links, and what a process holding it open sees), so a watcher
// of its directory sees WRITE on its name; a new file shows CREATE, then WRITE. A symlink at
// target is written through. The target and its missing parents are opened and made with u's
// file system credentials (identity.User.Act), so u must be allowed to; a new file is made
// 0644, and is u's.
//
// The body is first received whole into an unnamed (O_TMPFILE) file on the target's mount, so
// that a cut or broken request leaves the target untouched. A new file is then that file,
// linked in (linkNew). Over an existing file, the blocks for the new size are reserved
// (fallocate: a full disk fails the upload before the old content is touched), the content
// copied over it from offset 0 (copy_file_range: a copy in the kernel, a shared extent where
// the file system has reflinks) and the file cut to the new size. Streaming straight into
// the target, as E2B's envd does, would save that second copy but leave a truncated file
// behind a cut upload. The copy costs: a 64 MiB upload took 55-75 ms before (every upload a
// new inode linked over the old name); after, a new file takes the same, and one over an
// existing file 95-155 ms, on ext4 on a busy two-core machine (go test -bench Upload64MiB
// ./internal/guest/envd/files/).
//
// The file gets exactly the metadata md (user.e2b.* attributes): md is first set on the
// unnamed file, so a file system that refuses it fails the upload with the target unchanged;
// an existing target's is then replaced once its content is written. stored is false when
// the file system keeps no user attributes; the file is written anyway.
func writeFile(target string, u *identity.User, r io.Reader, md map[string]string, heavy bool) (n int64, stored bool, err error) {
	dir := filepath.Dir(target)
	err = u.Act(func() error {
		if fi, err := os.Stat(target); err == nil && fi.IsDir() {
			return fmt.Errorf("upload %s: %w: it is a directory", target, fault.ErrInvalid)
		} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return filesystem.OSError("upload", target, err)
		}
		_, err := filesystem.MkdirAll(dir, u)
		return err
	})
	if err != nil {
		return 0, false, err
	}
	// The unnamed file is envd's own, made as root: the user may write the target and still
	// not the mount's root, where it is made.
	tmp, named, err := createUnnamed(dir)
	if err != nil {
		return 0, false, filesystem.OSError("upload", target, err)
	}
	defer func() {
		_ = tmp.Close()
		if named {
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
		return n, false, filesystem.OSError("write", target, err)
	}
	stored = true
	if len(md) > 0 {
		if err := filesystem.WriteMetadata(tmp, md); errors.Is(err, filesystem.ErrXattrUnsupported) {
			stored = false
		} else if err != nil {
			return n, false, err
		}
	}
	if !named {
		linked, err := linkNew(target, u, tmp, n)
		if err != nil {
			return n, false, err
		}
		if linked {
			return n, stored, nil
		}
	}
	var keep map[string]string // nil: the file system keeps none, leave it
	if stored {
		keep = md
	}
	if err := u.Act(func() error { return copyInto(target, u, tmp, n, keep) }); err != nil {
		return n, false, err
	}
	return n, stored, nil
}

// linkNew gives the unnamed file tmp, of n bytes, the name target when no file has that name:
// a new file needs no copy, and a reader sees all of it or nothing. It reports false, having
// done nothing, when target exists (or is a symlink). The file's last byte is then written
// again through its new name, so that a watcher of the directory sees CREATE, then WRITE, as
// with E2B's envd: what is done through tmp is reported under tmp's own unnamed entry.
func linkNew(target string, u *identity.User, tmp *os.File, n int64) (linked bool, err error) {
	// Mode and owner while envd still owns the file: the user could not change them.
	if err := tmp.Chmod(0o644); err != nil {
		return false, filesystem.OSError("chmod", target, err)
	}
	if u != nil && os.Geteuid() == 0 && !u.IsSelf() {
		if err := tmp.Chown(u.UID, u.GID); err != nil {
			return false, filesystem.OSError("chown", target, err)
		}
	}
	err = u.Act(func() error {
		src := fmt.Sprintf("/proc/self/fd/%d", tmp.Fd())
		err := unix.Linkat(unix.AT_FDCWD, src, unix.AT_FDCWD, target, unix.AT_SYMLINK_FOLLOW)
		if errors.Is(err, unix.EEXIST) {
			return nil
		}
		if err != nil {
			return filesystem.OSError("upload", target, err)
		}
		linked = true
		if n == 0 {
			return nil // E2B's envd shows no WRITE for a new empty file either
		}
		// The upload is done: a failure here costs the WRITE event only, and is ignored.
		last := make([]byte, 1)
		if _, err := tmp.ReadAt(last, n-1); err != nil {
			return nil
		}
		if f, err := os.OpenFile(target, os.O_WRONLY, 0); err == nil {
			_, _ = f.WriteAt(last, n-1)
			_ = f.Close()
		}
		return nil
	})
	return linked, err
}

// copyInto writes the n bytes of tmp over the file at target, creating it if it is missing,
// and then makes md its metadata unless md is nil.
func copyInto(target string, u *identity.User, tmp *os.File, n int64, md map[string]string) error {
	f, created, err := openTarget(target)
	if err != nil {
		return filesystem.OSError("upload", target, err)
	}
	ok := false
	defer func() {
		_ = f.Close()
		if !ok && created {
			_ = os.Remove(target)
		}
	}()
	if created {
		if err := f.Chmod(0o644); err != nil {
			return filesystem.OSError("chmod", target, err)
		}
		if u != nil && os.Geteuid() == 0 && !u.IsSelf() {
			if err := f.Chown(u.UID, u.GID); err != nil {
				return filesystem.OSError("chown", target, err)
			}
		}
	}
	if n > 0 {
		err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_KEEP_SIZE, 0, n)
		if err != nil && !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.ENOSYS) {
			return filesystem.OSError("upload", target, err)
		}
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return filesystem.OSError("upload", target, err)
	}
	// *os.File's ReadFrom from another *os.File is copy_file_range.
	if _, err := f.ReadFrom(io.LimitReader(tmp, n)); err != nil {
		return filesystem.OSError("write", target, err)
	}
	if err := f.Truncate(n); err != nil {
		return filesystem.OSError("write", target, err)
	}
	if md != nil {
		if err := filesystem.ReplaceMetadata(f, md); err != nil {
			return err
		}
	}
	ok = true
	return nil
}

// openTarget opens target for writing without truncating it; created reports that this call
// made the file.
func openTarget(target string) (f *os.File, created bool, err error) {
	f, err = os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err == nil {
		return f, true, nil
	}
	if !errors.Is(err, fs.ErrExist) {
		return nil, false, err
	}
	// There already, or a symlink (O_EXCL never follows one). Opened without O_CREAT, which
	// fs.protected_regular refuses, even to root, for another's file in a sticky directory
	// such as /tmp; a dangling symlink (or a file removed meanwhile) is then created.
	f, err = os.OpenFile(target, os.O_WRONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		f, err = os.OpenFile(target, os.O_WRONLY|os.O_CREATE, 0o644)
	}
	return f, false, err
}

// createUnnamed opens an unnamed file (O_TMPFILE) on dir's mount, for reading and writing,
// so that no name but the target's ever shows in dir. The file is made in the mount's root,
// not in dir: the kernel reports writes to an unnamed file to a watcher of its directory as
// "#<inode>", so in dir a watcher would see that name; a target in the mount's root itself
// still shows it. named is true when the file system has no O_TMPFILE and the file is a
// hidden temporary one in dir instead.
func createUnnamed(dir string) (f *os.File, named bool, err error) {
	fd, err := unix.Open(mountRoot(dir), unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err == nil {
		return os.NewFile(uintptr(fd), dir), false, nil
	}
	if !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EINVAL) {
		return nil, false, err
	}
	f, err = os.CreateTemp(dir, ".cove-upload-*")
	return f, true, err
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
