// Package buildctx packs a template build's COPY sources the way E2B's SDKs upload them,
// and names them by their files hash. It is shared by the builder and the Go SDK, so the
// two can never hash a context differently; it imports nothing of Cove's.
package buildctx

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// ErrInvalid is a COPY that cannot be packed; the builder marks it as its template.ErrInvalid
// (a 400).
var ErrInvalid = errors.New("invalid template spec")

// ArchiveContext writes a tar of src (a file or directory, relative to the context dir ctxDir)
// to w, the way E2B's SDKs pack a COPY, and returns the files hash of "COPY src dest": the
// sha256 of the step text and every file's path, mode, size and content. Owners and times
// do not count, so the hash is the same on every machine.
func ArchiveContext(ctxDir, src, dest string, w io.Writer) (string, error) {
	src = path.Clean(filepath.ToSlash(src))
	if src == ".." || strings.HasPrefix(src, "../") || path.IsAbs(src) {
		return "", fmt.Errorf("%w: copy source %q must be inside the context directory", ErrInvalid, src)
	}
	// Every path is opened within the context: a symlink in it is packed as a symlink and
	// never followed out of it, not even as a directory on a source's path (src "link/x").
	root, err := os.OpenRoot(ctxDir)
	if err != nil {
		return "", fmt.Errorf("%w: context directory: %v", ErrInvalid, err)
	}
	defer root.Close()
	h := sha256.New()
	fmt.Fprintf(h, "COPY %s %s", src, dest)
	tw := tar.NewWriter(w)
	if _, err := root.Lstat(src); err != nil {
		return "", fmt.Errorf("%w: copy source %s: %v", ErrInvalid, src, err)
	}
	paths, err := walk(root, src)
	if err != nil {
		return "", fmt.Errorf("copy source %s: %w", src, err)
	}
	sort.Strings(paths)
	for _, rel := range paths {
		fi, err := root.Lstat(rel)
		if err != nil {
			return "", err
		}
		link := ""
		if fi.Mode()&os.ModeSymlink != 0 {
			if link, err = root.Readlink(rel); err != nil {
				return "", err
			}
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return "", err
		}
		hdr.Name = rel
		if fi.IsDir() {
			hdr.Name += "/"
		}
		h.Write([]byte(rel))
		h.Write([]byte(strconv.FormatUint(uint64(fi.Mode().Perm()), 8) + strconv.FormatInt(fi.Size(), 10) + link))
		if err := tw.WriteHeader(hdr); err != nil {
			return "", err
		}
		if fi.Mode().IsRegular() {
			f, err := root.Open(rel)
			if err != nil {
				return "", err
			}
			_, err = io.Copy(io.MultiWriter(tw, h), f)
			f.Close()
			if err != nil {
				return "", err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// walk lists p and, when it is a directory (not a symlink to one), everything below it,
// as slash paths relative to root.
func walk(root *os.Root, p string) ([]string, error) {
	paths := []string{p}
	fi, err := root.Lstat(p)
	if err != nil || !fi.IsDir() {
		return paths, err
	}
	d, err := root.Open(p)
	if err != nil {
		return nil, err
	}
	entries, err := d.ReadDir(-1)
	d.Close()
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		below, err := walk(root, path.Join(p, e.Name()))
		if err != nil {
			return nil, err
		}
		paths = append(paths, below...)
	}
	return paths, nil
}
