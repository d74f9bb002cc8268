package build

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/cove-dev/cove/internal/builder/template"
	"github.com/cove-dev/cove/internal/errdefs"
	"github.com/cove-dev/cove/sdk/buildctx"
)

// FileSource opens the archive a COPY step uploaded under its files hash: a tar stream,
// gzipped or not, whose entries are named relative to the build's context directory (the
// way E2B's SDKs upload them).
type FileSource interface {
	OpenFiles(hash string) (io.ReadCloser, error)
}

// DirSource is a FileSource over a directory of archives named by their hash
// (<dir>/<hash>.tar): where the API keeps uploads.
type DirSource string

// OpenFiles implements FileSource.
func (d DirSource) OpenFiles(hash string) (io.ReadCloser, error) {
	if !template.ValidHash(hash) {
		return nil, fmt.Errorf("%w: files hash %q is not a hex sha256", template.ErrInvalid, hash)
	}
	f, err := os.Open(filepath.Join(string(d), hash+".tar"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: no files were uploaded for hash %s", template.ErrInvalid, hash)
	}
	return f, err
}

// ArchiveContext writes a tar of src to w, the way E2B's SDKs pack a COPY, and returns
// its files hash (see buildctx.ArchiveContext, which the Go SDK shares).
func ArchiveContext(ctxDir, src, dest string, w io.Writer) (string, error) {
	h, err := buildctx.ArchiveContext(ctxDir, src, dest, w)
	if errors.Is(err, buildctx.ErrInvalid) {
		return "", errdefs.Mark(err, template.ErrInvalid)
	}
	return h, err
}

// copyFiles unpacks a COPY's archive into root (the build's merged view), Docker's way:
// a source directory's contents go into dest, a single file goes to dest (or into it when dest
// ends with "/" or is a directory), glob matches go into dest. Paths never leave root.
func copyFiles(root *os.Root, archive io.Reader, src, dest string, uid, gid int, mode uint32) (n int, err error) {
	src = strings.TrimSuffix(path.Clean(filepath.ToSlash(src)), "/")
	destIsDir := strings.HasSuffix(dest, "/")
	dest = path.Clean("/" + dest)
	br := bufio.NewReader(archive)
	var r io.Reader = br
	if magic, _ := br.Peek(2); bytes.Equal(magic, []byte{0x1f, 0x8b}) {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return 0, fmt.Errorf("copy %s: %w", src, err)
		}
		defer zr.Close()
		r = zr
	}
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return n, fmt.Errorf("copy %s: read archive: %w", src, err)
		}
		name := strings.TrimSuffix(path.Clean(hdr.Name), "/")
		var target string
		switch {
		case name == src && hdr.Typeflag != tar.TypeDir:
			target = dest
			if destIsDir || isDir(root, dest) {
				target = path.Join(dest, path.Base(name))
			}
		case name == src || src == ".":
			rel := strings.TrimPrefix(name, src)
			if src == "." {
				rel = name
			}
			target = path.Join(dest, rel)
		case strings.HasPrefix(name, src+"/"):
			target = path.Join(dest, strings.TrimPrefix(name, src+"/"))
		default:
			// A glob: what it matches lands in dest by its base name, with what lies below.
			if ok, _ := path.Match(src, name); ok {
				target = path.Join(dest, path.Base(name))
			} else if rel, ok := globRel(src, name); ok {
				target = path.Join(dest, rel)
			} else {
				continue
			}
		}
		rel := strings.TrimPrefix(target, "/")
		if rel == "" {
			rel = "."
		}
		if err := mkdirAllRoot(root, path.Dir(rel), uid, gid); err != nil {
			return n, fmt.Errorf("copy %s: %w", name, err)
		}
		fmode := os.FileMode(hdr.Mode & 0o7777)
		if mode != 0 {
			fmode = os.FileMode(mode)
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := root.Mkdir(rel, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return n, fmt.Errorf("copy %s: %w", name, err)
			}
		case tar.TypeReg:
			_ = root.Remove(rel) // replace, never write through what was there
			f, err := root.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if err != nil {
				return n, fmt.Errorf("copy %s: %w", name, err)
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return n, fmt.Errorf("copy %s: %w", name, err)
			}
		case tar.TypeSymlink:
			_ = root.Remove(rel)
			if err := root.Symlink(hdr.Linkname, rel); err != nil {
				return n, fmt.Errorf("copy %s: %w", name, err)
			}
			if err := root.Lchown(rel, uid, gid); err != nil {
				return n, fmt.Errorf("copy %s: %w", name, err)
			}
			n++
			continue
		default:
			continue // devices, fifos and hard links have no place in an upload
		}
		if err := root.Lchown(rel, uid, gid); err != nil {
			return n, fmt.Errorf("copy %s: %w", name, err)
		}
		if hdr.Typeflag == tar.TypeDir && mode == 0 {
			fmode = os.FileMode(hdr.Mode&0o7777) | 0o700
		}
		if err := root.Chmod(rel, fmode); err != nil {
			return n, fmt.Errorf("copy %s: %w", name, err)
		}
		n++
	}
	if n == 0 {
		return 0, fmt.Errorf("%w: copy %s: the uploaded archive holds no file under %s", template.ErrInvalid, src, src)
	}
	return n, nil
}

func isDir(root *os.Root, p string) bool {
	fi, err := root.Stat(strings.TrimPrefix(p, "/"))
	return err == nil && fi.IsDir()
}

// globRel is name relative to the parent of the directory the glob src matches that name
// lies below; ok is false when name lies below no match.
func globRel(src, name string) (string, bool) {
	for d := path.Dir(name); d != "." && d != "/"; d = path.Dir(d) {
		if ok, _ := path.Match(src, d); ok {
			return strings.TrimPrefix(name, path.Dir(d)+"/"), true
		}
	}
	return "", false
}

// mkdirAllRoot creates dir and its missing parents below root, owned by uid:gid.
func mkdirAllRoot(root *os.Root, dir string, uid, gid int) error {
	if dir == "." || dir == "" || dir == "/" {
		return nil
	}
	if fi, err := root.Stat(dir); err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("%s is not a directory", dir)
		}
		return nil
	}
	if err := mkdirAllRoot(root, path.Dir(dir), uid, gid); err != nil {
		return err
	}
	if err := root.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return root.Lchown(dir, uid, gid)
}

// HostUploads is the store's directory of archives packed on the host (the COPY sources of
// Dockerfile builds run by the cove CLI and of the base definition), a DirSource.
func (s *Builder) HostUploads() (string, error) {
	dir := filepath.Join(s.Dir(), ".uploads")
	return dir, os.MkdirAll(dir, 0o755)
}
