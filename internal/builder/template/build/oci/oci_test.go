package oci_test

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/internal/builder/template/build/oci"
)

type entry struct {
	name, body, link string
	typ              byte
	mode             int64
	uid              int
	xattr            map[string]string
}

func layer(t *testing.T, entries ...entry) io.Reader {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, Uid: e.uid, Gid: e.uid, Linkname: e.link, Size: int64(len(e.body)), Format: tar.FormatPAX}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Typeflag != tar.TypeReg {
			h.Size = 0
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		for k, v := range e.xattr {
			if h.PAXRecords == nil {
				h.PAXRecords = map[string]string{}
			}
			h.PAXRecords["SCHILY.xattr."+k] = v
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write([]byte(e.body))
		}
	}
	tw.Close()
	return &buf
}

func TestApplyLayers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("oci: unpacking owners and devices needs root")
	}
	dst := t.TempDir()
	base := layer(t,
		entry{name: "usr/", typ: tar.TypeDir, mode: 0o755},
		entry{name: "usr/lib/", typ: tar.TypeDir, mode: 0o755},
		entry{name: "lib", typ: tar.TypeSymlink, link: "/usr/lib"},
		entry{name: "lib/libx.so", body: "lib through an absolute symlink"},
		entry{name: "bin/", typ: tar.TypeDir, mode: 0o755},
		entry{name: "bin/tool", body: "tool", mode: 0o4755, uid: 1000},
		entry{name: "bin/tool-link", typ: tar.TypeLink, link: "bin/tool"},
		entry{name: "etc/conf", body: "conf", xattr: map[string]string{"user.cove": "yes"}},
		entry{name: "etc/gone", body: "deleted above"},
		entry{name: "opaque/", typ: tar.TypeDir, mode: 0o755},
		entry{name: "opaque/old", body: "hidden above"},
		entry{name: "escape", typ: tar.TypeSymlink, link: "../../../../"},
		entry{name: "escape/outside", body: "must stay inside"},
		entry{name: "dev/", typ: tar.TypeDir, mode: 0o755},
		entry{name: "dev/sda", typ: tar.TypeBlock, mode: 0o666},
		entry{name: "dev/mem", typ: tar.TypeChar, mode: 0o666},
	)
	top := layer(t,
		entry{name: "etc/.wh.gone", body: ""},
		entry{name: "opaque/.wh..wh..opq", body: ""},
		entry{name: "opaque/new", body: "new"},
		entry{name: "etc/conf", body: "conf v2", mode: 0o600},
	)
	for i, l := range []io.Reader{base, top} {
		if err := oci.ApplyLayer(dst, l); err != nil {
			t.Fatalf("layer %d: %v", i+1, err)
		}
	}
	read := func(p string) string {
		b, err := os.ReadFile(filepath.Join(dst, p))
		if err != nil {
			return "<" + err.Error() + ">"
		}
		return string(b)
	}
	t.Run("a path through an absolute symlink stays inside the root", func(t *testing.T) {
		if got := read("usr/lib/libx.so"); got != "lib through an absolute symlink" {
			t.Fatalf("usr/lib/libx.so = %q", got)
		}
		if got := read("outside"); got != "must stay inside" {
			t.Fatalf("escape/outside landed elsewhere: /outside = %q", got)
		}
	})
	t.Run("owners and setuid bits are kept", func(t *testing.T) {
		fi, err := os.Stat(filepath.Join(dst, "bin/tool"))
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if st.Uid != 1000 || fi.Mode()&os.ModeSetuid == 0 || fi.Mode().Perm() != 0o755 {
			t.Fatalf("bin/tool: uid %d mode %v", st.Uid, fi.Mode())
		}
	})
	t.Run("device nodes are dropped: runc makes a sandbox's /dev", func(t *testing.T) {
		for _, p := range []string{"dev/sda", "dev/mem"} {
			if _, err := os.Lstat(filepath.Join(dst, p)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s: %v, want it not made", p, err)
			}
		}
	})
	t.Run("hard links share the inode", func(t *testing.T) {
		a, _ := os.Stat(filepath.Join(dst, "bin/tool"))
		b, _ := os.Stat(filepath.Join(dst, "bin/tool-link"))
		if a == nil || b == nil || !os.SameFile(a, b) {
			t.Fatal("bin/tool-link is not a hard link of bin/tool")
		}
	})
	t.Run("xattrs are kept and a later layer replaces a file", func(t *testing.T) {
		if got := read("etc/conf"); got != "conf v2" {
			t.Fatalf("etc/conf = %q", got)
		}
		buf := make([]byte, 16)
		if _, err := unix.Lgetxattr(filepath.Join(dst, "etc/conf"), "user.cove", buf); err == nil {
			t.Fatal("the replaced file kept the old file's xattr")
		}
	})
	t.Run("whiteouts delete and opaque dirs hide what lower layers made", func(t *testing.T) {
		if _, err := os.Lstat(filepath.Join(dst, "etc/gone")); !os.IsNotExist(err) {
			t.Fatalf("etc/gone: %v", err)
		}
		entries, _ := os.ReadDir(filepath.Join(dst, "opaque"))
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		if strings.Join(names, ",") != "new" {
			t.Fatalf("opaque/ = %v", names)
		}
		for _, p := range []string{"etc/.wh.gone", "opaque/.wh..wh..opq"} {
			if _, err := os.Lstat(filepath.Join(dst, p)); !os.IsNotExist(err) {
				t.Fatalf("the whiteout %s was written: %v", p, err)
			}
		}
	})
}

func TestXattrsAreKept(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("oci: needs root")
	}
	dst := t.TempDir()
	if err := oci.ApplyLayer(dst, layer(t, entry{name: "f", body: "x", xattr: map[string]string{"user.cove": "yes"}})); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16)
	n, err := unix.Lgetxattr(filepath.Join(dst, "f"), "user.cove", buf)
	if err != nil || string(buf[:n]) != "yes" {
		t.Fatalf("xattr user.cove = %q, %v", buf[:n], err)
	}
}
