package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cove-dev/cove/internal/control/server"
	"github.com/cove-dev/cove/internal/covetest"
	"github.com/cove-dev/cove/internal/sandbox/runtime"
)

// TestTLSServesTheAPIAndSandboxHosts: `cove server --tls-self-signed` serves the API and every
// sandbox host over TLS and HTTP/2 with a certificate from its CA, keeps the CA's key sealed,
// and the official SDK's host, auto-resume and private-port flows work over https; on each
// runtime.
func TestTLSServesTheAPIAndSandboxHosts(t *testing.T) {
	covetest.EachRuntime(t, func(t *testing.T, _ runtime.Engine) {
		s := covetest.StartWith(t, "", covetest.Options{OnStop: "kill", Args: []string{"--tls-self-signed"}})
		if !strings.HasPrefix(s.URL, "https://") {
			t.Fatalf("the server is up at %s, want https", s.URL)
		}
		ca := server.CAFile(s.DataDir)
		if !strings.Contains(s.Logs(), ca) {
			t.Errorf("the server did not print its CA's path %s", ca)
		}
		pemCA, err := os.ReadFile(ca)
		if err != nil {
			t.Fatal(err)
		}
		t.Run("the CA's key is sealed, owner only", func(t *testing.T) {
			key := filepath.Join(filepath.Dir(ca), "ca-key")
			fi, err := os.Stat(key)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := os.ReadFile(key)
			if fi.Mode().Perm() != 0o600 || strings.Contains(string(b), "PRIVATE KEY") {
				t.Errorf("%s: mode %v, sealed %v", key, fi.Mode().Perm(), !strings.Contains(string(b), "PRIVATE KEY"))
			}
		})

		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pemCA) {
			t.Fatalf("%s holds no certificate", ca)
		}
		_, port, _ := net.SplitHostPort(strings.TrimPrefix(s.URL, "https://"))
		dialer := &net.Dialer{}
		hc := &http.Client{Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: pool},
			ForceAttemptHTTP2: true,
			// {port}-{id}.cove.localhost is loopback, as curl and browsers take it.
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				if host, p, err := net.SplitHostPort(addr); err == nil && strings.HasSuffix(host, ".localhost") {
					addr = net.JoinHostPort("127.0.0.1", p)
				}
				return dialer.DialContext(ctx, network, addr)
			},
		}}
		t.Cleanup(hc.CloseIdleConnections)
		get := func(url string, header ...string) *http.Response {
			t.Helper()
			req, _ := http.NewRequest(http.MethodGet, url, nil)
			for i := 0; i+1 < len(header); i += 2 {
				req.Header.Set(header[i], header[i+1])
			}
			res, err := hc.Do(req)
			if err != nil {
				t.Fatalf("GET %s: %v", url, err)
			}
			t.Cleanup(func() { res.Body.Close() })
			return res
		}

		var id, domain string
		t.Run("the API answers over TLS with HTTP/2", func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, s.URL+"/sandboxes", strings.NewReader(`{"templateID":"base"}`))
			req.Header.Set("X-API-Key", s.Key)
			req.Header.Set("Content-Type", "application/json")
			res, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			var created map[string]any
			b, _ := io.ReadAll(res.Body)
			_ = json.Unmarshal(b, &created)
			if res.StatusCode != http.StatusCreated || res.Proto != "HTTP/2.0" {
				t.Fatalf("create: %s %d %s", res.Proto, res.StatusCode, b)
			}
			id, _ = created["sandboxID"].(string)
			domain, _ = created["domain"].(string)
			if domain != server.DefaultTLSDomain+":"+port {
				t.Errorf("create's domain %q, want %s:%s", domain, server.DefaultTLSDomain, port)
			}
		})
		if id == "" {
			t.FailNow()
		}
		t.Run("a sandbox host answers over TLS with HTTP/2 under the wildcard certificate", func(t *testing.T) {
			res := get("https://49983-" + id + "." + domain + "/health")
			if res.StatusCode != http.StatusNoContent || res.Proto != "HTTP/2.0" {
				t.Errorf("GET /health of %s: %s %d, want HTTP/2.0 204", id, res.Proto, res.StatusCode)
			}
		})
		t.Run("an upload, a download and an RPC through a sandbox host go over HTTP/2", func(t *testing.T) {
			host := "https://49983-" + id + "." + domain
			var body bytes.Buffer
			mw := multipart.NewWriter(&body)
			fw, _ := mw.CreateFormFile("file", "x.txt")
			io.WriteString(fw, "over h2")
			mw.Close()
			req, _ := http.NewRequest(http.MethodPost, host+"/files?path=/tmp/h2.txt&username=user", &body)
			req.Header.Set("Content-Type", mw.FormDataContentType())
			res, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != http.StatusOK || res.Proto != "HTTP/2.0" {
				t.Fatalf("upload: %s %d", res.Proto, res.StatusCode)
			}
			res = get(host + "/files?path=/tmp/h2.txt&username=user")
			if b, _ := io.ReadAll(res.Body); res.StatusCode != http.StatusOK || string(b) != "over h2" {
				t.Errorf("download: %s %d %q", res.Proto, res.StatusCode, b)
			}
			req, _ = http.NewRequest(http.MethodPost, host+"/filesystem.Filesystem/Stat", strings.NewReader(`{"path":"/tmp/h2.txt"}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Basic dXNlcjo=")
			res, err = hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			if b, _ := io.ReadAll(res.Body); res.StatusCode != http.StatusOK || res.Proto != "HTTP/2.0" || !strings.Contains(string(b), "h2.txt") {
				t.Errorf("Stat: %s %d %s", res.Proto, res.StatusCode, b)
			}
		})
		t.Run("the SDK's flows over https", func(t *testing.T) {
			_, compat := covetest.NodeSDK(t)
			covetest.RunSDKScenarios(t, "tls.test.mjs", s.URL, s.Key,
				"E2B_SANDBOX_URL=", "NODE_EXTRA_CA_CERTS="+ca, "NODE_OPTIONS=--import "+filepath.Join(compat, "localhost.mjs"))
		})
		t.Run("the SDK's whole scenario suite passes over https as over http", func(t *testing.T) {
			// server.test.mjs is what test/e2e runs over plain http: the same file, the API and
			// envd reached over TLS with the test CA trusted.
			_, compat := covetest.NodeSDK(t)
			covetest.RunSDKScenarios(t, "server.test.mjs", s.URL, s.Key,
				"NODE_EXTRA_CA_CERTS="+ca, "NODE_OPTIONS=--import "+filepath.Join(compat, "localhost.mjs"))
		})
	})
}
