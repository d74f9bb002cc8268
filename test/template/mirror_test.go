package template_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/covetest"
)

// TestServerMirror starts `cove server` on an empty template store with --mirror naming a
// Debian "mirror" the test serves on loopback (empty: every file is missing), so the base's
// first build asks it for the suite's release and fails; a mirror that is not a URL
// debootstrap takes is refused before anything is built.
func TestServerMirror(t *testing.T) {
	if testing.Short() {
		t.Skip("runs cove server: skipped under -short")
	}
	covetest.Skip(t)
	var mu sync.Mutex
	var asked []string
	mirror := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked = append(asked, r.URL.Path)
		mu.Unlock()
		http.NotFound(w, r)
	}))
	t.Cleanup(mirror.Close)
	for _, tc := range []struct {
		name, mirror string
		want         []string // in the server's output
		wantAsked    bool
	}{
		{name: "the base's first build downloads Debian from the mirror given", mirror: mirror.URL + "/debian",
			want: []string{"debian from the mirror " + mirror.URL + "/debian", "build base template"}, wantAsked: true},
		{name: "a mirror that is no http, https or file URL is refused", mirror: "ftp://" + strings.TrimPrefix(mirror.URL, "http://"),
			want: []string{"--mirror: invalid", "want an http, https or file URL"}},
		{name: "a mirror URL without a host is refused", mirror: "http:///debian",
			want: []string{"--mirror: invalid", "names no host"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			asked = nil
			mu.Unlock()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, covetest.Binary(t), "server", "--data", t.TempDir(), "--templates", t.TempDir(),
				"--addr", "127.0.0.1:0", "--network=false", "--mirror", tc.mirror)
			out, err := cmd.CombinedOutput()
			if err == nil || ctx.Err() != nil {
				t.Fatalf("server: %v (want it to fail at the base's build)\n%s", err, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("the output does not say %q:\n%s", w, out)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			var release bool
			for _, p := range asked {
				release = release || strings.HasPrefix(p, "/debian/dists/bookworm/")
			}
			if release != tc.wantAsked {
				t.Errorf("the mirror was asked for %q; want the suite's release asked: %v", asked, tc.wantAsked)
			}
		})
	}
}
