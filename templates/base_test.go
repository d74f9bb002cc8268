package templates_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/builder/template"
	"github.com/cove-dev/cove/internal/builder/template/build"
	"github.com/cove-dev/cove/internal/sandbox/runtime"
	"github.com/cove-dev/cove/internal/sandbox/runtime/runtimetest"
	"github.com/cove-dev/cove/internal/store/sqlite"
	"github.com/cove-dev/cove/templates"
)

func TestMain(m *testing.M) {
	code := m.Run()
	runtimetest.Cleanup()
	os.Exit(code)
}

// TestBaseDefinition reads the shipped definition: what the base contains is what E2B's
// default template offers (the same packages, user, sudo and pip setting as ever).
func TestBaseDefinition(t *testing.T) {
	store, err := openStore(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := templates.BaseSpec(store, "base", "")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"bash", "coreutils", "procps", "iproute2", "python3", "python3-pip", "python-is-python3", "curl", "ca-certificates", "git", "sudo"}
	if spec.Bootstrap == nil || spec.Bootstrap.Suite != "bookworm" || !slices.Equal(spec.Bootstrap.Include, want) {
		t.Fatalf("bootstrap = %+v, want bookworm with %v", spec.Bootstrap, want)
	}
	var text []string
	for _, st := range spec.Steps {
		text = append(text, st.String())
		if st.Kind == template.StepCopy {
			rc, err := spec.Files.OpenFiles(st.FilesHash)
			if err != nil {
				t.Fatalf("%s: its files were not packed: %v", st, err)
			}
			rc.Close()
		}
	}
	all := strings.Join(text, "\n")
	for _, w := range []string{"useradd --uid 1000", "--home-dir /home/user", "COPY sudoers /etc/sudoers.d/user root 0440",
		"COPY pip.conf /etc/pip.conf", "COPY dpkg-slim /etc/dpkg/dpkg.cfg.d/cove-slim", "USER user", "WORKDIR /home/user"} {
		if !strings.Contains(all, w) {
			t.Errorf("the base's steps lack %q:\n%s", w, all)
		}
	}
	if spec.Key != templates.BaseKey() {
		t.Errorf("spec key %q, want BaseKey %q", spec.Key, templates.BaseKey())
	}
}

// TestBuildBase builds the shipped base for real (debootstrap, about a minute, and the
// host's Debian mirror): run it with COVE_TEST_DEBOOTSTRAP=1.
func TestBuildBase(t *testing.T) {
	if os.Getenv("COVE_TEST_DEBOOTSTRAP") != "1" {
		t.Skip("templates: set COVE_TEST_DEBOOTSTRAP=1 to build the base from its definition (about a minute, needs the Debian mirror)")
	}
	rt := runtimetest.Runc(t)
	ctx := context.Background()
	store, err := openStore(t, rt)
	if err != nil {
		t.Fatal(err)
	}
	buildBase := func(t *testing.T, mut func(*build.Spec)) (*template.Template, string) {
		t.Helper()
		spec, err := templates.BaseSpec(store, "base", "")
		if err != nil {
			t.Fatal(err)
		}
		spec.Replace = true
		if mut != nil {
			mut(&spec)
		}
		var progress bytes.Buffer
		t0 := time.Now()
		tpl, err := store.Build(ctx, spec, &progress)
		if err != nil {
			t.Fatalf("%v\n%s", err, progress.String())
		}
		t.Logf("base built in %s", time.Since(t0).Round(time.Millisecond))
		return tpl, progress.String()
	}
	tpl, progress := buildBase(t, nil)
	if tpl.Key != templates.BaseKey() || tpl.User != "user" || tpl.Workdir != "/home/user" {
		t.Fatalf("base = key %q, user %q, workdir %q", tpl.Key, tpl.User, tpl.Workdir)
	}
	for _, w := range []string{"==> BOOTSTRAP bookworm", "I: Base system installed successfully", "==> [2/6] RUN (as root) useradd", "==> ready: base"} {
		if !strings.Contains(progress, w) {
			t.Errorf("progress lacks %q", w)
		}
	}

	// run runs script with sh as uid 1000 in a sandbox on tpl and returns its output.
	run := func(t *testing.T, tpl *template.Template, script string) string {
		t.Helper()
		b := make([]byte, 4)
		rand.Read(b)
		id := "base-" + hex.EncodeToString(b)
		sb, err := rt.Create(ctx, runtime.Spec{ID: id, Rootfs: tpl.Rootfs, Layers: tpl.LayerDirs, UID: 1000, GID: 1000, Cwd: "/home/user",
			Args: []string{"/bin/sh", "-c", script}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rt.Destroy(ctx, id) })
		if err := rt.Start(ctx, id); err != nil {
			t.Fatal(err)
		}
		go io.Copy(io.Discard, sb.Stderr)
		var out bytes.Buffer
		out.ReadFrom(sb.Stdout)
		return out.String()
	}
	t.Run("the base holds what E2B's default template offers", func(t *testing.T) {
		out := run(t, tpl, `for p in /usr/bin/python3 /usr/bin/python /usr/bin/pip /usr/bin/git /usr/bin/curl /bin/bash /bin/ps /usr/bin/ip /usr/bin/sudo \
			/etc/sudoers.d/user /etc/pip.conf /etc/ssl/certs/ca-certificates.crt /etc/dpkg/dpkg.cfg.d/cove-slim; do [ -e $p ] || echo "missing $p"; done
			ls /var/lib/apt/lists/*_Packages 2>/dev/null | sed 's/^/kept /'
			stat -c '%u:%g %U %a' /home/user /etc/sudoers.d/user
			python3 -c 'import os; print(os.getuid(), os.getcwd())'
			sudo -n id -u
			grep -c break-system-packages /etc/pip.conf`)
		want := "1000:1000 user 750\n0:0 root 440\n1000 /home/user\n0\n1\n"
		if out != want {
			t.Fatalf("in a sandbox on the base:\n%s\nwant:\n%s", out, want)
		}
	})
	t.Run("a rebuild with nothing changed takes every step from the cache", func(t *testing.T) {
		again, _ := buildBase(t, nil)
		for _, r := range again.Built {
			if !r.Cached && r.Layer != "" {
				t.Errorf("step %q ran again", r.Step)
			}
		}
		if !again.Built[0].Cached {
			t.Errorf("the BOOTSTRAP ran again: %+v", again.Built[0])
		}
	})
	t.Run("a changed step rebuilds from that step only", func(t *testing.T) {
		changed, progress := buildBase(t, func(s *build.Spec) {
			i := slices.IndexFunc(s.Steps, func(st template.Step) bool { return st.Kind == template.StepRun })
			s.Steps[i].Args[0] += " && echo changed > /etc/cove-changed"
		})
		for i, r := range changed.Built {
			rebuilt := r.Layer != "" && !r.Cached
			if wantRebuilt := i >= 2 && r.Layer != ""; rebuilt != wantRebuilt {
				t.Errorf("step %d %q: rebuilt %v, want %v", i, r.Step, rebuilt, wantRebuilt)
			}
		}
		if strings.Contains(progress, "debootstrap") {
			t.Errorf("the BOOTSTRAP ran again:\n%s", progress)
		}
		if out := run(t, changed, "cat /etc/cove-changed; sudo -n id -u"); out != "changed\n0\n" {
			t.Errorf("in a sandbox on the changed base: %q", out)
		}
	})
	t.Run("ls shows the base's own layers and the root it shares", func(t *testing.T) {
		use, err := store.Usage()
		if err != nil {
			t.Fatal(err)
		}
		root, err := store.Get(tpl.Root)
		if err != nil {
			t.Fatal(err)
		}
		u := use["base"]
		t.Logf("base: own %d KiB, shared %d MiB", u.Own>>10, u.Shared>>20)
		if u.Shared != root.SizeBytes || u.Own <= 0 || u.Own > root.SizeBytes/20 {
			t.Fatalf("usage %+v, root %d bytes", u, root.SizeBytes)
		}
	})
}

// openStore opens a template store of the test's own, its records in a SQLite file of its own.
func openStore(t *testing.T, rt runtime.Runtime) (*build.Builder, error) {
	t.Helper()
	data := t.TempDir()
	db, err := sqlite.Open(context.Background(), filepath.Join(data, "cove.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ts, err := template.Open(context.Background(), data, db)
	if err != nil {
		return nil, err
	}
	return build.New(ts, rt), nil
}
