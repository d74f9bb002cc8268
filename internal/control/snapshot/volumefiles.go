package snapshot

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"
	"syscall"

	"github.com/cove-dev/cove/internal/errdefs"
)

// The volume content API (E2B's Volume class: list, makeDir, getInfo, updateMetadata,
// readFile, writeFile, remove) works on a volume's files from the host. Sandboxes write
// those files too, symlinks included, so every path is resolved inside the volume's root
// (os.Root): a name or a link that leads out of it is refused, never followed.

// Errors of the volume content API, of errdefs' kinds.
var (
	ErrPathNotFound = errdefs.New(errdefs.ErrNotFound, "path not found")
	ErrPathInvalid  = errdefs.New(errdefs.ErrInvalidArgument, "bad path")
	ErrPathExists   = errdefs.New(errdefs.ErrConflict, "path exists")
	ErrVolumeFull   = errdefs.New(errdefs.ErrNoSpace, "volume is full")
)

// DefaultUID and DefaultGID own what the content API writes unless told otherwise: the
// sandboxes' default user, so commands in a sandbox can change it.
const DefaultUID, DefaultGID = 1000, 1000

// Files is one volume's content, opened for the content API. Close it after use.
type Files struct {
	vol  *Volume
	root *os.Root
}

// Entry is a file or directory of a volume: its path in the volume ("/a/b") and its stat.
type Entry struct {
	Path   string
	Info   fs.FileInfo
	Target string // a symlink's target
}

// Meta is what updateMetadata and the write options may set; nil leaves it alone.
type Meta struct {
	UID, GID *int
	Mode     *fs.FileMode
}

// Files opens vol's content.
func (v *Volumes) Files(vol *Volume) (*Files, error) {
	// In a cluster the volume is held here first (fetched when another node released it);
	// it stays held: files written here reach the object store at its next release.
	if err := v.Hold(context.Background(), vol); err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(v.DataDir(vol.ID))
	if err != nil {
		return nil, fmt.Errorf("open volume %s: %w", vol.Name, err)
	}
	return &Files{vol: vol, root: root}, nil
}

// Close releases the volume's root.
func (f *Files) Close() error { return f.root.Close() }

// clean turns a path of the volume ("/a/b", "a/b", "" or "/" for its root) into a name for
// os.Root and the path reported back; a path that climbs out of the volume is ErrPathInvalid.
func clean(p string) (name, shown string, err error) {
	if strings.IndexByte(p, 0) >= 0 {
		return "", "", fmt.Errorf("%w: %q holds a NUL byte", ErrPathInvalid, p)
	}
	depth := 0
	for _, part := range strings.Split(p, "/") {
		switch part {
		case "", ".":
		case "..":
			if depth--; depth < 0 {
				return "", "", fmt.Errorf("%w: %q leads out of the volume", ErrPathInvalid, p)
			}
		default:
			depth++
		}
	}
	shown = path.Clean("/" + p)
	if shown == "/" {
		return ".", shown, nil
	}
	return shown[1:], shown, nil
}

// fail maps a file system error on p to the content API's errors.
func (f *Files) fail(op, p string, err error) error {
	var errno syscall.Errno
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%w: %s %s in volume %s", ErrPathNotFound, op, p, f.vol.Name)
	case errors.Is(err, fs.ErrExist):
		return fmt.Errorf("%w: %s %s in volume %s", ErrPathExists, op, p, f.vol.Name)
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return fmt.Errorf("%w: %s %s: volume %s holds at most %d bytes", ErrVolumeFull, op, p, f.vol.Name, f.vol.SizeBytes)
	case errors.Is(err, syscall.ENOTDIR):
		return fmt.Errorf("%w: %s %s: a part of the path is not a directory", ErrPathInvalid, op, p)
	case errors.Is(err, syscall.EISDIR):
		return fmt.Errorf("%w: %s %s: it is a directory", ErrPathExists, op, p)
	case errors.Is(err, syscall.ENOTEMPTY):
		return fmt.Errorf("%w: %s %s: directory not empty", ErrPathExists, op, p)
	case errors.As(err, &errno) && (errno == syscall.ELOOP || errno == syscall.EXDEV):
		return fmt.Errorf("%w: %s %s: it leads out of the volume", ErrPathInvalid, op, p)
	case strings.Contains(err.Error(), "escapes"): // os.Root: a symlink out of the volume
		return fmt.Errorf("%w: %s %s: it leads out of the volume", ErrPathInvalid, op, p)
	}
	return fmt.Errorf("%s %s in volume %s: %w", op, p, f.vol.Name, err)
}

func (f *Files) entry(name, shown string) (Entry, error) {
	fi, err := f.root.Lstat(name)
	if err != nil {
		return Entry{}, f.fail("stat", shown, err)
	}
	e := Entry{Path: shown, Info: fi}
	if fi.Mode()&fs.ModeSymlink != 0 {
		e.Target, _ = f.root.Readlink(name)
	}
	return e, nil
}

// Stat returns the entry at p (a symlink itself, not its target).
func (f *Files) Stat(p string) (Entry, error) {
	name, shown, err := clean(p)
	if err != nil {
		return Entry{}, err
	}
	return f.entry(name, shown)
}

// List returns the entries of the directory p, depth levels deep (1: its own entries),
// sorted by path.
func (f *Files) List(p string, depth int) ([]Entry, error) {
	name, shown, err := clean(p)
	if err != nil {
		return nil, err
	}
	if depth < 1 {
		depth = 1
	}
	fi, err := f.root.Stat(name)
	if err != nil {
		return nil, f.fail("list", shown, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%w: list %s: not a directory", ErrPathInvalid, shown)
	}
	var out []Entry
	var walk func(name, shown string, left int) error
	walk = func(name, shown string, left int) error {
		d, err := f.root.Open(name)
		if err != nil {
			return f.fail("list", shown, err)
		}
		names, err := d.Readdirnames(-1)
		d.Close()
		if err != nil {
			return f.fail("list", shown, err)
		}
		sort.Strings(names)
		for _, n := range names {
			child, childShown := path.Join(name, n), path.Join(shown, n)
			e, err := f.entry(child, childShown)
			if errors.Is(err, ErrPathNotFound) {
				continue // removed meanwhile
			} else if err != nil {
				return err
			}
			out = append(out, e)
			if left > 1 && e.Info.IsDir() {
				if err := walk(child, childShown, left-1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(name, shown, depth); err != nil {
		return nil, err
	}
	return out, nil
}

// MakeDir makes the directory p and applies m. With parents, missing parents are made and
// an existing directory is no error (mkdir -p).
func (f *Files) MakeDir(p string, parents bool, m Meta) (Entry, error) {
	name, shown, err := clean(p)
	if err != nil {
		return Entry{}, err
	}
	if name == "." {
		return Entry{}, fmt.Errorf("%w: make dir /: the volume's root exists", ErrPathExists)
	}
	mode := fs.FileMode(0o755)
	if m.Mode != nil {
		mode = *m.Mode
	}
	if parents { // mkdir -p: an existing directory is fine
		err = f.makeParents(path.Dir(name), m)
		if err == nil {
			err = f.root.Mkdir(name, mode)
		}
		if fi, serr := f.root.Lstat(name); errors.Is(err, fs.ErrExist) && serr == nil && fi.IsDir() {
			return f.apply(name, shown, m, false)
		}
	} else {
		err = f.root.Mkdir(name, mode)
	}
	if err != nil {
		return Entry{}, f.fail("make dir", shown, err)
	}
	return f.apply(name, shown, m, true)
}

// makeParents makes the missing directories of dir (a name for os.Root), each owned as what
// the content API makes is (m's uid and gid, else the sandboxes' user), so that a sandbox can
// write in the directories an upload made.
func (f *Files) makeParents(dir string, m Meta) error {
	uid, gid := DefaultUID, DefaultGID
	if m.UID != nil {
		uid = *m.UID
	}
	if m.GID != nil {
		gid = *m.GID
	}
	at := ""
	for _, part := range strings.Split(dir, "/") {
		if part == "" || part == "." {
			continue
		}
		at = path.Join(at, part)
		err := f.root.Mkdir(at, 0o755)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return err
		}
		if err := f.root.Lchown(at, uid, gid); err != nil {
			return err
		}
	}
	return nil
}

// apply sets m on name, with the defaults for what the content API made when made is set.
func (f *Files) apply(name, shown string, m Meta, made bool) (Entry, error) {
	uid, gid := -1, -1
	if made {
		uid, gid = DefaultUID, DefaultGID
	}
	if m.UID != nil {
		uid = *m.UID
	}
	if m.GID != nil {
		gid = *m.GID
	}
	if uid != -1 || gid != -1 {
		if err := f.root.Lchown(name, uid, gid); err != nil {
			return Entry{}, f.fail("chown", shown, err)
		}
	}
	if m.Mode != nil {
		fi, err := f.root.Lstat(name)
		if err != nil {
			return Entry{}, f.fail("chmod", shown, err)
		}
		if fi.Mode()&fs.ModeSymlink == 0 { // Linux has no mode for a link
			if err := f.root.Chmod(name, *m.Mode&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)); err != nil {
				return Entry{}, f.fail("chmod", shown, err)
			}
		}
	}
	return f.entry(name, shown)
}

// SetMeta changes p's owner and mode.
func (f *Files) SetMeta(p string, m Meta) (Entry, error) {
	name, shown, err := clean(p)
	if err != nil {
		return Entry{}, err
	}
	if _, err := f.root.Lstat(name); err != nil {
		return Entry{}, f.fail("update", shown, err)
	}
	return f.apply(name, shown, m, false)
}

// Open opens the file p for reading.
func (f *Files) Open(p string) (*os.File, Entry, error) {
	name, shown, err := clean(p)
	if err != nil {
		return nil, Entry{}, err
	}
	file, err := f.root.Open(name)
	if err != nil {
		return nil, Entry{}, f.fail("read", shown, err)
	}
	fi, err := file.Stat()
	if err != nil {
		file.Close()
		return nil, Entry{}, f.fail("read", shown, err)
	}
	if fi.IsDir() {
		file.Close()
		return nil, Entry{}, fmt.Errorf("%w: read %s: it is a directory", ErrPathInvalid, shown)
	}
	return file, Entry{Path: shown, Info: fi}, nil
}

// Write writes r to the file p, replacing what p held, all or nothing: the bytes go to a
// new file beside it, renamed over p once complete, so a full volume (ErrVolumeFull) or a
// broken upload leaves p as it was. With parents, missing parent directories are made.
func (f *Files) Write(p string, r io.Reader, parents bool, m Meta) (Entry, error) {
	name, shown, err := clean(p)
	if err != nil {
		return Entry{}, err
	}
	if name == "." {
		return Entry{}, fmt.Errorf("%w: write /: it is the volume's root", ErrPathInvalid)
	}
	dir := path.Dir(name)
	if parents && dir != "." {
		if err := f.makeParents(dir, m); err != nil {
			return Entry{}, f.fail("write", shown, err)
		}
	}
	if fi, err := f.root.Lstat(name); err == nil && fi.IsDir() {
		return Entry{}, fmt.Errorf("%w: write %s: it is a directory", ErrPathExists, shown)
	}
	mode := fs.FileMode(0o644)
	if m.Mode != nil {
		mode = *m.Mode & fs.ModePerm
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	tmp := path.Join(dir, ".cove-upload-"+hex.EncodeToString(b))
	file, err := f.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return Entry{}, f.fail("write", shown, err)
	}
	_, err = io.Copy(file, r)
	if cerr := file.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = f.root.Rename(tmp, name)
	}
	if err != nil {
		_ = f.root.Remove(tmp)
		var errno syscall.Errno
		if errors.As(err, &errno) || errors.Is(err, fs.ErrNotExist) {
			return Entry{}, f.fail("write", shown, err)
		}
		return Entry{}, fmt.Errorf("write %s in volume %s: %w", shown, f.vol.Name, err)
	}
	return f.apply(name, shown, m, true)
}

// Remove removes p, a directory with what it holds.
func (f *Files) Remove(p string) error {
	name, shown, err := clean(p)
	if err != nil {
		return err
	}
	if name == "." {
		return fmt.Errorf("%w: remove /: delete the volume instead", ErrPathInvalid)
	}
	if _, err := f.root.Lstat(name); err != nil {
		return f.fail("remove", shown, err)
	}
	if err := f.root.RemoveAll(name); err != nil {
		return f.fail("remove", shown, err)
	}
	return nil
}
