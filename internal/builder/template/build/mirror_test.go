package build

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cove-dev/cove/internal/builder/template"
)

func TestAptMirror(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		suite string
		want  string
	}{
		{
			name: "a deb822 source picks the stanza of the suite, not security",
			files: map[string]string{"sources.list.d/debian.sources": `Types: deb
URIs: http://security.example/debian-security
Suites: bookworm-security
Components: main

Types: deb deb-src
# a comment
URIs: http://mirror.example/debian/
Suites: bookworm bookworm-updates
Components: main
`},
			suite: "bookworm",
			want:  "http://mirror.example/debian",
		},
		{
			name: "a disabled stanza is skipped",
			files: map[string]string{"sources.list.d/debian.sources": `Enabled: no
Types: deb
URIs: http://off.example/debian
Suites: bookworm

Types: deb
URIs: http://on.example/debian
Suites: bookworm
`},
			suite: "bookworm",
			want:  "http://on.example/debian",
		},
		{
			name:  "a one-line source with options is read",
			files: map[string]string{"sources.list": "# deb http://old.example/debian bookworm main\ndeb [arch=amd64 signed-by=/k.gpg] http://line.example/debian bookworm main\n"},
			suite: "bookworm",
			want:  "http://line.example/debian",
		},
		{
			name:  "no source for the suite is an error",
			files: map[string]string{"sources.list": "deb http://line.example/debian bullseye main\n"},
			suite: "bookworm",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			etc := t.TempDir()
			for name, content := range tc.files {
				p := filepath.Join(etc, name)
				os.MkdirAll(filepath.Dir(p), 0o755)
				if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := aptMirror(etc, tc.suite)
			if tc.want == "" {
				if err == nil {
					t.Fatalf("got %q, want an error", got)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestEnsureHostPackages(t *testing.T) {
	ctx := context.Background()
	t.Run("a name that looks like an option is refused before apt runs", func(t *testing.T) {
		err := EnsureHostPackages(ctx, "--allow-unauthenticated")
		if err == nil || !strings.Contains(err.Error(), "not a Debian package name") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("installed packages need no apt", func(t *testing.T) {
		if _, err := os.Stat("/var/lib/dpkg/status"); errors.Is(err, os.ErrNotExist) {
			t.Skip("template: needs a Debian host (dpkg)")
		}
		if err := EnsureHostPackages(ctx, "dpkg", "coreutils"); err != nil {
			t.Fatal(err)
		}
	})
}

func TestValidMirror(t *testing.T) {
	for _, tc := range []struct {
		name, mirror string
		ok           bool
	}{
		{"no mirror is the machine's apt sources", "", true},
		{"an http URL with a path is a mirror", "http://mirror.example/debian", true},
		{"an https URL is a mirror", "https://mirror.example/debian/", true},
		{"a file URL with a path is a mirror", "file:///srv/debian", true},
		{"an ftp URL is refused", "ftp://mirror.example/debian", false},
		{"a bare host is refused", "mirror.example/debian", false},
		{"an http URL without a host is refused", "http:///debian", false},
		{"a file URL with a host is refused", "file://host/srv/debian", false},
		{"credentials in the URL are refused", "http://u:p@mirror.example/debian", false},
		{"a query is refused", "http://mirror.example/debian?x=1", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidMirror(tc.mirror)
			if (err == nil) != tc.ok || (err != nil && !errors.Is(err, template.ErrInvalid)) {
				t.Fatalf("ValidMirror(%q) = %v, want ok %v", tc.mirror, err, tc.ok)
			}
		})
	}
}
