// Package oci brings OCI and Docker images into Cove as root filesystems: it pulls them from
// registries (github.com/google/go-containerregistry), loads `docker save` and OCI layout
// archives, and unpacks their layers.
//
// The one idea: layers are applied in order onto one directory the way a container runtime's
// snapshotter would, with every path resolved inside that directory (symlinks in the image
// are followed as if it were the root), whiteouts deleting what lower layers made, and
// owners, modes, hard links, xattrs and times kept.
package oci

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"
)

const (
	whiteoutPrefix = ".wh."
	whiteoutOpaque = ".wh..wh..opq"
)

// Unpack applies img's layers, bottom first, onto the directory dst.
func Unpack(img v1.Image, dst string) error {
	layers, err := img.Layers()
	if err != nil {
		return fmt.Errorf("image layers: %w", err)
	}
	for i, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			return fmt.Errorf("layer %d: %w", i+1, err)
		}
		err = ApplyLayer(dst, rc)
		rc.Close()
		if err != nil {
			return fmt.Errorf("layer %d: %w", i+1, err)
		}
	}
	return nil
}

// ApplyLayer applies one uncompressed layer tar onto dst.
func ApplyLayer(dst string, r io.Reader) error {
	tr := tar.NewReader(r)
	type dirTime struct {
		path string
		t    time.Time
	}
	var dirs []dirTime // directory times are set last: writing inside changes them
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("read layer: %w", err)
		}
		name := path.Clean("/" + hdr.Name)
		if name == "/" {
			continue
		}
		parent, base := path.Split(name)
		pdir, err := resolve(dst, parent)
		if err != nil {
			return fmt.Errorf("%s: %w", hdr.Name, err)
		}
		if err := os.MkdirAll(pdir, 0o755); err != nil {
			return fmt.Errorf("%s: %w", hdr.Name, err)
		}
		target := filepath.Join(pdir, base)
		if base == whiteoutOpaque {
			entries, err := os.ReadDir(pdir)
			if err != nil {
				return fmt.Errorf("%s: %w", hdr.Name, err)
			}
			for _, e := range entries {
				if err := os.RemoveAll(filepath.Join(pdir, e.Name())); err != nil {
					return err
				}
			}
			continue
		}
		if hidden, ok := strings.CutPrefix(base, whiteoutPrefix); ok {
			if err := os.RemoveAll(filepath.Join(pdir, hidden)); err != nil {
				return fmt.Errorf("%s: %w", hdr.Name, err)
			}
			continue
		}
		if fi, err := os.Lstat(target); err == nil && !(fi.IsDir() && hdr.Typeflag == tar.TypeDir) {
			if err := os.RemoveAll(target); err != nil { // a later layer replaces what was there
				return fmt.Errorf("%s: %w", hdr.Name, err)
			}
		}
		mode := os.FileMode(hdr.Mode & 0o777)
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.Mkdir(target, mode); err != nil && !errors.Is(err, os.ErrExist) {
				return fmt.Errorf("%s: %w", hdr.Name, err)
			}
			dirs = append(dirs, dirTime{target, hdr.ModTime})
		case tar.TypeReg: // the reader reports the old TypeRegA as TypeReg
			f, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
			if err != nil {
				return fmt.Errorf("%s: %w", hdr.Name, err)
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("%s: %w", hdr.Name, err)
			}
		case tar.TypeSymlink:
			if err := os.Symlink(hdr.Linkname, target); err != nil {
				return fmt.Errorf("%s: %w", hdr.Name, err)
			}
		case tar.TypeLink:
			lname := path.Clean("/" + hdr.Linkname)
			lparent, lbase := path.Split(lname)
			ldir, err := resolve(dst, lparent)
			if err != nil {
				return fmt.Errorf("%s: link to %s: %w", hdr.Name, hdr.Linkname, err)
			}
			if err := os.Link(filepath.Join(ldir, lbase), target); err != nil {
				return fmt.Errorf("%s: %w", hdr.Name, err)
			}
			continue // a hard link shares the inode: owner, mode and xattrs are the target's
		case tar.TypeChar, tar.TypeBlock:
			// Dropped: a device node of a tenant's image would be one on the host's disk (a
			// world-writable one to the host's disk, say); runc makes a sandbox's /dev.
			continue
		case tar.TypeFifo:
			if err := unix.Mknod(target, unix.S_IFIFO|uint32(mode), 0); err != nil {
				return fmt.Errorf("%s: %w", hdr.Name, err)
			}
		default:
			continue // pax globals and the like carry no file
		}
		if err := os.Lchown(target, hdr.Uid, hdr.Gid); err != nil {
			return fmt.Errorf("%s: chown: %w", hdr.Name, err)
		}
		for k, v := range hdr.PAXRecords {
			if attr, ok := strings.CutPrefix(k, "SCHILY.xattr."); ok {
				if err := unix.Lsetxattr(target, attr, []byte(v), 0); err != nil && !errors.Is(err, unix.ENOTSUP) {
					return fmt.Errorf("%s: xattr %s: %w", hdr.Name, attr, err)
				}
			}
		}
		if hdr.Typeflag != tar.TypeSymlink {
			// chmod after chown: chown clears setuid and setgid bits.
			if err := os.Chmod(target, os.FileMode(hdr.Mode&0o777)|modeBits(hdr.Mode)); err != nil {
				return fmt.Errorf("%s: chmod: %w", hdr.Name, err)
			}
		}
		if hdr.Typeflag != tar.TypeDir {
			ts := []unix.Timespec{unix.NsecToTimespec(hdr.AccessTime.UnixNano()), unix.NsecToTimespec(hdr.ModTime.UnixNano())}
			if hdr.AccessTime.IsZero() {
				ts[0] = ts[1]
			}
			_ = unix.UtimesNanoAt(unix.AT_FDCWD, target, ts, unix.AT_SYMLINK_NOFOLLOW)
		}
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		t := unix.NsecToTimespec(dirs[i].t.UnixNano())
		_ = unix.UtimesNanoAt(unix.AT_FDCWD, dirs[i].path, []unix.Timespec{t, t}, unix.AT_SYMLINK_NOFOLLOW)
	}
	return nil
}

// modeBits maps tar's setuid, setgid and sticky bits to Go's.
func modeBits(m int64) os.FileMode {
	var out os.FileMode
	if m&0o4000 != 0 {
		out |= os.ModeSetuid
	}
	if m&0o2000 != 0 {
		out |= os.ModeSetgid
	}
	if m&0o1000 != 0 {
		out |= os.ModeSticky
	}
	return out
}

// resolve returns the host path of the directory dir inside root, following the image's
// symlinks as if root were "/": no component can lead outside root. Missing components are
// returned as plain names (the caller creates them).
func resolve(root, dir string) (string, error) {
	parts := strings.Split(strings.Trim(path.Clean("/"+dir), "/"), "/")
	cur := "/"
	links := 0
	for len(parts) > 0 {
		p := parts[0]
		parts = parts[1:]
		if p == "" || p == "." {
			continue
		}
		if p == ".." {
			cur = path.Dir(cur)
			continue
		}
		next := path.Join(cur, p)
		fi, err := os.Lstat(filepath.Join(root, next))
		if err != nil || fi.Mode()&os.ModeSymlink == 0 {
			cur = next
			continue
		}
		links++
		if links > 40 {
			return "", fmt.Errorf("too many symlinks under %s", dir)
		}
		target, err := os.Readlink(filepath.Join(root, next))
		if err != nil {
			return "", err
		}
		if path.IsAbs(target) {
			cur = "/"
		}
		parts = append(strings.Split(strings.Trim(target, "/"), "/"), parts...)
	}
	return filepath.Join(root, cur), nil
}
