package filesystem

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/internal/guest/envd/fault"
)

// User metadata, as E2B's envd keeps it: each key/value pair is the extended attribute
// user.e2b.<key> on the file. The limits are E2B's: a key fits the VFS's 255-byte xattr
// name once prefixed, and all of a file's metadata (prefixed keys plus values) fits 4 KiB,
// about what ext4 keeps per inode without the ea_inode feature.
const (
	MetadataXattrPrefix = "user.e2b."
	MaxMetadataKeyLen   = 255 - len(MetadataXattrPrefix) // 246
	MaxMetadataSize     = 4096
)

// ErrXattrUnsupported is returned by WriteMetadata when the file system keeps no user
// extended attributes (ENOTSUP): tmpfs on old kernels, some network and virtual file systems.
var ErrXattrUnsupported = errors.New("the file system does not support user extended attributes")

// ValidMetadataText reports whether s is printable US-ASCII (0x20-0x7E), the only bytes a
// metadata key or value may hold.
func ValidMetadataText(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// MetadataSize is what md counts against MaxMetadataSize: every key with its xattr prefix,
// plus every value.
func MetadataSize(md map[string]string) int {
	n := 0
	for k, v := range md {
		n += len(MetadataXattrPrefix) + len(k) + len(v)
	}
	return n
}

// ReadMetadata returns the user.e2b.* attributes of path, prefix stripped, following a final
// symlink: Linux keeps no user attributes on a symlink itself, so a link shows its target's
// metadata. It never fails: a file without attributes, a file system without them, a
// dangling link or an unreadable attribute all read as (part of) an empty map.
func ReadMetadata(path string) map[string]string {
	md := map[string]string{}
	names, err := listXattrs(path)
	if err != nil {
		return md
	}
	for _, name := range names {
		key, ok := strings.CutPrefix(name, MetadataXattrPrefix)
		if !ok || key == "" {
			continue
		}
		if v, err := getXattr(path, name); err == nil {
			md[key] = v
		}
	}
	return md
}

func listXattrs(path string) ([]string, error) {
	return xattrNames(func(buf []byte) (int, error) { return unix.Listxattr(path, buf) })
}

func flistXattrs(fd int) ([]string, error) {
	return xattrNames(func(buf []byte) (int, error) { return unix.Flistxattr(fd, buf) })
}

// xattrNames calls list, a listxattr(2) call, with a buffer big enough for the names.
func xattrNames(list func(buf []byte) (int, error)) ([]string, error) {
	size := 256
	for range 4 {
		buf := make([]byte, size)
		n, err := list(buf)
		if errors.Is(err, unix.ERANGE) {
			// Grew meanwhile: ask for the size and retry.
			if n, err = list(nil); err != nil {
				return nil, err
			}
			size = n + 64
			continue
		}
		if err != nil {
			return nil, err
		}
		var names []string
		for _, name := range strings.Split(string(buf[:n]), "\x00") {
			if name != "" {
				names = append(names, name)
			}
		}
		return names, nil
	}
	return nil, unix.ERANGE
}

func getXattr(path, name string) (string, error) {
	size := 256
	for range 4 {
		buf := make([]byte, size)
		n, err := unix.Getxattr(path, name, buf)
		if errors.Is(err, unix.ERANGE) {
			if n, err = unix.Getxattr(path, name, nil); err != nil {
				return "", err
			}
			size = n + 64
			continue
		}
		if err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
	return "", unix.ERANGE
}

// WriteMetadata sets md as user.e2b.* attributes on the open file f, in key order. It only
// adds (ReplaceMetadata also removes). An unsupporting file system is ErrXattrUnsupported; no room for the
// attributes is fault.ErrNoSpace; other failures are wrapped with OSError.
func WriteMetadata(f *os.File, md map[string]string) error {
	keys := make([]string, 0, len(md))
	for k := range md {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		err := unix.Fsetxattr(int(f.Fd()), MetadataXattrPrefix+k, []byte(md[k]), 0)
		switch {
		case err == nil:
		case errors.Is(err, unix.ENOTSUP), errors.Is(err, unix.EOPNOTSUPP):
			return fmt.Errorf("set metadata on %s: %w", f.Name(), ErrXattrUnsupported)
		case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EDQUOT), errors.Is(err, unix.E2BIG):
			return fmt.Errorf("set metadata %q on %s: %w: the file system has no room for this much metadata (%v)", k, f.Name(), fault.ErrNoSpace, err)
		default:
			return OSError("set metadata "+k+" on", f.Name(), err)
		}
	}
	return nil
}

// ReplaceMetadata makes md the user.e2b.* attributes of the open file f: attributes not in md
// are removed, and only values that differ are set, so a file whose metadata does not change
// is not touched (a watcher sees no attribute event). Errors are WriteMetadata's.
func ReplaceMetadata(f *os.File, md map[string]string) error {
	fd := int(f.Fd())
	names, err := flistXattrs(fd)
	if errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.EOPNOTSUPP) {
		if len(md) == 0 {
			return nil
		}
		return fmt.Errorf("set metadata on %s: %w", f.Name(), ErrXattrUnsupported)
	}
	if err != nil {
		return OSError("list metadata of", f.Name(), err)
	}
	change := make(map[string]string, len(md))
	for k, v := range md {
		change[k] = v
	}
	for _, name := range names {
		key, ok := strings.CutPrefix(name, MetadataXattrPrefix)
		if !ok {
			continue
		}
		want, keep := md[key]
		if !keep {
			if err := unix.Fremovexattr(fd, name); err != nil && !errors.Is(err, unix.ENODATA) {
				return OSError("remove metadata "+key+" of", f.Name(), err)
			}
			continue
		}
		buf := make([]byte, len(want)+1) // one more: a longer value reads as ERANGE, i.e. different
		if n, err := unix.Fgetxattr(fd, name, buf); err == nil && string(buf[:n]) == want {
			delete(change, key)
		}
	}
	return WriteMetadata(f, change)
}
