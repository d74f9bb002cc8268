package cove

import (
	"errors"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/cove-dev/cove/sdk/envdapi"
)

func TestFileURLs(t *testing.T) {
	t.Parallel()
	c := NewClient(Config{APIURL: "http://127.0.0.1:3000", APIKey: "e2b_00"})
	secure := c.newSandbox(CreatedSandbox{SandboxID: "isb1", EnvdAccessToken: "tok"}, "")
	open := c.newSandbox(CreatedSandbox{SandboxID: "isb2"}, "")
	cases := []struct {
		name      string
		url       func() (string, error)
		wantQuery url.Values // signature_expiration checked apart
		wantHost  string
		expires   bool
		err       error
	}{
		{
			name:      "a secure sandbox's download URL is signed for reading and names no sandbox",
			url:       func() (string, error) { return secure.DownloadURL("/home/user/a b.txt") },
			wantQuery: url.Values{"path": {"/home/user/a b.txt"}, "signature": {envdapi.Sign("/home/user/a b.txt", "read", "", "tok", 0)}},
			wantHost:  "127.0.0.1:3000",
		},
		{
			name:      "an upload URL for a user is signed for writing with the user",
			url:       func() (string, error) { return secure.UploadURL("x", User("root")) },
			wantQuery: url.Values{"path": {"x"}, "username": {"root"}, "signature": {envdapi.Sign("x", "write", "root", "tok", 0)}},
			wantHost:  "127.0.0.1:3000",
		},
		{
			name:     "an expiring URL carries its expiration in the signature",
			url:      func() (string, error) { return secure.DownloadURL("x", SignatureExpiration(time.Minute)) },
			wantHost: "127.0.0.1:3000",
			expires:  true,
		},
		{
			name:      "an insecure sandbox's URL names it in the host, unsigned",
			url:       func() (string, error) { return open.DownloadURL("x") },
			wantQuery: url.Values{"path": {"x"}},
			wantHost:  "49983-isb2.127.0.0.1:3000",
		},
		{
			name: "an insecure sandbox cannot make an expiring URL",
			url:  func() (string, error) { return open.UploadURL("x", SignatureExpiration(time.Minute)) },
			err:  ErrNotSecure,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			raw, err := tc.url()
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("err %v, want %v", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			u, err := url.Parse(raw)
			if err != nil {
				t.Fatal(err)
			}
			if u.Host != tc.wantHost || u.Path != "/files" {
				t.Errorf("URL %s: host %q path %q, want %q /files", raw, u.Host, u.Path, tc.wantHost)
			}
			q := u.Query()
			if tc.expires {
				exp, err := strconv.ParseInt(q.Get("signature_expiration"), 10, 64)
				if err != nil || exp < time.Now().Add(50*time.Second).Unix() || exp > time.Now().Add(70*time.Second).Unix() {
					t.Fatalf("signature_expiration %q, want about a minute from now", q.Get("signature_expiration"))
				}
				if want := envdapi.Sign("x", "read", "", "tok", exp); q.Get("signature") != want {
					t.Errorf("signature %q, want %q", q.Get("signature"), want)
				}
				return
			}
			if q.Encode() != tc.wantQuery.Encode() {
				t.Errorf("query %s, want %s", q.Encode(), tc.wantQuery.Encode())
			}
		})
	}
}
