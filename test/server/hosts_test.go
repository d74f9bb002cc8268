package server

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/covetest"
)

// TestSandboxHostsWorkOutOfTheBox starts a web server in a sandbox and reaches it through
// the host the SDKs' getHost(port) builds from create's domain: {port}-{id}.localhost on
// the server's own port, with no --domain and no DNS set up.
func TestSandboxHostsWorkOutOfTheBox(t *testing.T) {
	s := covetest.Start(t, "")
	c := client{t: t, url: s.URL, key: s.Key}
	code, out, _ := c.do(http.MethodPost, "/sandboxes", map[string]any{"templateID": "base"})
	if code != http.StatusCreated {
		t.Fatalf("create: %d %v", code, out)
	}
	id := out["sandboxID"].(string)
	t.Cleanup(func() { c.do(http.MethodDelete, "/sandboxes/"+id, nil) })
	u, err := url.Parse(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	wantDomain := "localhost:" + u.Port()
	if out["domain"] != wantDomain {
		t.Fatalf("create's domain = %v, want %q", out["domain"], wantDomain)
	}
	if _, info, _ := c.do(http.MethodGet, "/sandboxes/"+id, nil); info["domain"] != wantDomain {
		t.Fatalf("info's domain = %v, want %q", info["domain"], wantDomain)
	}
	start := exec.Command(covetest.Binary(t), "exec", "--background", id, "--", "python3", "-m", "http.server", "8000", "--directory", "/etc")
	start.Env = append(os.Environ(), "COVE_API_URL="+s.URL, "COVE_API_KEY="+s.Key)
	if b, err := start.CombinedOutput(); err != nil {
		t.Fatalf("cove exec --background: %v\n%s", err, b)
	}
	host := "8000-" + id + "." + wantDomain // what sandbox.getHost(8000) returns

	t.Run("a Go client reaches the sandbox's port by that Host", func(t *testing.T) {
		body := waitFor(t, func() (string, bool) {
			req, _ := http.NewRequest(http.MethodGet, s.URL+"/", nil)
			req.Host = host
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				return err.Error(), false
			}
			defer res.Body.Close()
			b, _ := io.ReadAll(res.Body)
			return string(b), res.StatusCode == http.StatusOK
		})
		if !strings.Contains(body, "hostname") {
			t.Fatalf("the listing of /etc has no hostname: %.300s", body)
		}
	})
	t.Run("curl reaches it by name, with no DNS set up", func(t *testing.T) {
		curl, err := exec.LookPath("curl")
		if err != nil {
			t.Skip("curl is not installed")
		}
		body := waitFor(t, func() (string, bool) {
			b, err := exec.Command(curl, "-sf", "--max-time", "5", "http://"+host+"/").CombinedOutput()
			return string(b), err == nil
		})
		if !strings.Contains(body, "hostname") {
			t.Fatalf("the listing of /etc has no hostname: %.300s", body)
		}
	})
}

// waitFor retries try until it reports done, for up to a minute, and returns its last result.
func waitFor(t *testing.T, try func() (string, bool)) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		got, ok := try()
		if ok {
			return got
		}
		select {
		case <-ctx.Done():
			t.Fatalf("not reached within a minute; last: %.300s", got)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
