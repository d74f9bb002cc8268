package files_test

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/internal/guest/envd/files"
	"github.com/cove-dev/cove/internal/guest/envd/filesystem"
	"github.com/cove-dev/cove/internal/guest/envd/identity"
	"github.com/cove-dev/cove/internal/httpx"
	rpc "github.com/cove-dev/cove/sdk/gen/filesystem"
	"github.com/cove-dev/cove/sdk/gen/filesystem/filesystemconnect"
)

// needXattrs skips the test when dir's file system keeps no user extended attributes.
func needXattrs(t *testing.T, dir string) {
	t.Helper()
	probe := filepath.Join(dir, ".xattr-probe")
	if err := os.WriteFile(probe, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(probe)
	if err := unix.Setxattr(probe, "user.probe", []byte("1"), 0); err != nil {
		if errors.Is(err, unix.ENOTSUP) {
			t.Skipf("the file system of %s does not support user extended attributes (ENOTSUP)", dir)
		}
		t.Fatalf("probing user xattrs on %s: %v", dir, err)
	}
}

// serveBoth starts /files and the Filesystem service behind one server, as envd does.
func serveBoth(t *testing.T) (*httptest.Server, filesystemconnect.FilesystemClient) {
	t.Helper()
	d := &identity.Defaults{}
	svc := filesystem.New(d)
	mux := http.NewServeMux()
	mux.Handle("/files", files.New(d))
	mux.Handle(filesystemconnect.NewFilesystemHandler(svc))
	srv := httptest.NewServer(httpx.RequestIDs(nil, mux))
	t.Cleanup(func() {
		svc.Close()
		srv.Close()
	})
	return srv, filesystemconnect.NewFilesystemClient(srv.Client(), srv.URL, connect.WithProtoJSON())
}

// upload posts data to path with header; headers are set raw, exactly as given.
func upload(t *testing.T, srv *httptest.Server, path, data string, header http.Header) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, fileURL(srv, url.Values{"path": {path}}), strings.NewReader(data))
	req.Header.Set("Content-Type", "application/octet-stream")
	for k, v := range header {
		req.Header[k] = v
	}
	res, body := do(t, req)
	return res.StatusCode, body
}

func entries(t *testing.T, body []byte) []files.Entry {
	t.Helper()
	var es []files.Entry
	if err := json.Unmarshal(body, &es); err != nil {
		t.Fatalf("answer %q: %v", body, err)
	}
	return es
}

// xattrs reads every user.e2b.* attribute of path straight from the file system.
func xattrs(t *testing.T, path string) map[string]string {
	t.Helper()
	return filesystem.ReadMetadata(path)
}

func TestUploadMetadata(t *testing.T) {
	t.Parallel()
	srv, client := serveBoth(t)
	dir := t.TempDir()
	needXattrs(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stat := func(p string) map[string]string {
		t.Helper()
		res, err := client.Stat(ctx, connect.NewRequest(&rpc.StatRequest{Path: p}))
		if err != nil {
			t.Fatal(err)
		}
		return res.Msg.GetEntry().GetMetadata()
	}
	want := map[string]string{"owner": "team-a", "x.y": "1 2"}

	t.Run("stored, answered, and returned by Stat and ListDir", func(t *testing.T) {
		p := filepath.Join(dir, "sub", "meta.txt")
		status, body := upload(t, srv, p, "m", http.Header{"X-Metadata-Owner": {"team-a"}, "x-metadata-X.Y": {"1 2"}})
		if status != 200 {
			t.Fatalf("status %d: %s", status, body)
		}
		if es := entries(t, body); len(es) != 1 || !maps.Equal(es[0].Metadata, want) {
			t.Errorf("answer = %s, want metadata %v", body, want)
		}
		if got := stat(p); !maps.Equal(got, want) {
			t.Errorf("Stat metadata = %v, want %v", got, want)
		}
		ls, err := client.ListDir(ctx, connect.NewRequest(&rpc.ListDirRequest{Path: filepath.Dir(p)}))
		if err != nil {
			t.Fatal(err)
		}
		if es := ls.Msg.GetEntries(); len(es) != 1 || !maps.Equal(es[0].GetMetadata(), want) {
			t.Errorf("ListDir = %v, want one entry with %v", es, want)
		}
	})

	t.Run("multipart files all get it", func(t *testing.T) {
		a, b := filepath.Join(dir, "mp", "a.txt"), filepath.Join(dir, "mp", "b.txt")
		ct, buf := multipartBody(t, [2]string{a, "A"}, [2]string{b, "B"})
		req, _ := http.NewRequest(http.MethodPost, fileURL(srv, url.Values{}), buf)
		req.Header.Set("Content-Type", ct)
		req.Header.Set("X-Metadata-Owner", "team-a")
		res, body := do(t, req)
		if res.StatusCode != 200 {
			t.Fatalf("status %d: %s", res.StatusCode, body)
		}
		one := map[string]string{"owner": "team-a"}
		for _, e := range entries(t, body) {
			if !maps.Equal(e.Metadata, one) {
				t.Errorf("answer entry %+v, want metadata %v", e, one)
			}
		}
		for _, p := range []string{a, b} {
			if got := stat(p); !maps.Equal(got, one) {
				t.Errorf("%s metadata = %v, want %v", p, got, one)
			}
		}
	})

	t.Run("an upload replaces the metadata", func(t *testing.T) {
		p := filepath.Join(dir, "replace.txt")
		upload(t, srv, p, "1", http.Header{"X-Metadata-A": {"1"}, "X-Metadata-B": {"2"}})
		status, body := upload(t, srv, p, "2", http.Header{"X-Metadata-B": {"3"}})
		if status != 200 {
			t.Fatalf("status %d: %s", status, body)
		}
		if got, want := stat(p), map[string]string{"b": "3"}; !maps.Equal(got, want) {
			t.Errorf("metadata = %v, want %v", got, want)
		}
	})

	t.Run("an upload without metadata clears it", func(t *testing.T) {
		p := filepath.Join(dir, "clear.txt")
		upload(t, srv, p, "1", http.Header{"X-Metadata-A": {"1"}})
		status, body := upload(t, srv, p, "2", nil)
		if status != 200 {
			t.Fatalf("status %d: %s", status, body)
		}
		if strings.Contains(string(body), "metadata") {
			t.Errorf("answer %s mentions metadata", body)
		}
		if got := stat(p); len(got) != 0 {
			t.Errorf("metadata = %v, want none", got)
		}
	})

	t.Run("the first of a repeated header wins", func(t *testing.T) {
		p := filepath.Join(dir, "repeated.txt")
		status, body := upload(t, srv, p, "1", http.Header{"X-Metadata-K": {"first", "second"}})
		if status != 200 {
			t.Fatalf("status %d: %s", status, body)
		}
		if got, want := stat(p), map[string]string{"k": "first"}; !maps.Equal(got, want) {
			t.Errorf("metadata = %v, want %v", got, want)
		}
	})

	t.Run("writing through a symlink stores it on the target", func(t *testing.T) {
		target, link := filepath.Join(dir, "target.txt"), filepath.Join(dir, "link.txt")
		upload(t, srv, target, "t", nil)
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
		status, body := upload(t, srv, link, "via link", http.Header{"X-Metadata-K": {"v"}})
		if status != 200 {
			t.Fatalf("status %d: %s", status, body)
		}
		want := map[string]string{"k": "v"}
		if got := xattrs(t, target); !maps.Equal(got, want) {
			t.Errorf("target metadata = %v, want %v", got, want)
		}
		if got := stat(link); !maps.Equal(got, want) {
			t.Errorf("Stat of the link = %v, want the target's %v", got, want)
		}
	})

	t.Run("within the limits is accepted", func(t *testing.T) {
		p := filepath.Join(dir, "limits.txt")
		key := strings.Repeat("k", filesystem.MaxMetadataKeyLen)
		status, body := upload(t, srv, p, "1", http.Header{"X-Metadata-" + key: {strings.Repeat("v", 1000)}})
		if status != 200 {
			t.Fatalf("status %d: %s", status, body)
		}
		if got := stat(p); got[key] != strings.Repeat("v", 1000) {
			t.Errorf("metadata = %v", got)
		}
	})
}

func TestUploadMetadataRefused(t *testing.T) {
	t.Parallel()
	srv, _ := serveBoth(t)
	dir := t.TempDir()
	needXattrs(t, dir)
	p := filepath.Join(dir, "kept.txt")
	keep := map[string]string{"keep": "me"}
	if status, body := upload(t, srv, p, "old", http.Header{"X-Metadata-Keep": {"me"}}); status != 200 {
		t.Fatalf("status %d: %s", status, body)
	}
	tests := []struct {
		name   string
		header http.Header
		naming string // what the error message must mention
	}{
		{"a tab in a value", http.Header{"X-Metadata-Bad": {"a\tb"}}, "X-Metadata-Bad"},
		{"a non-ASCII value", http.Header{"X-Metadata-Bad": {"caf\xc3\xa9"}}, "X-Metadata-Bad"},
		{"a key too long", http.Header{"X-Metadata-" + strings.Repeat("k", filesystem.MaxMetadataKeyLen+1): {"v"}}, "246"},
		{"too much in total", http.Header{
			"X-Metadata-A": {strings.Repeat("a", 2000)},
			"X-Metadata-B": {strings.Repeat("b", 2000)},
			"X-Metadata-C": {strings.Repeat("c", 100)},
		}, "4096"},
		{"an empty key", http.Header{"X-Metadata-": {"v"}}, "X-Metadata-"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := upload(t, srv, p, "new", tt.header)
			if status != 400 {
				t.Fatalf("status %d (%s), want 400", status, body)
			}
			if b := errorBody(t, 400, body); !strings.Contains(b.Message, tt.naming) {
				t.Errorf("message %q does not mention %q", b.Message, tt.naming)
			}
			if got, _ := os.ReadFile(p); string(got) != "old" {
				t.Errorf("the file became %q", got)
			}
			if got := xattrs(t, p); !maps.Equal(got, keep) {
				t.Errorf("the metadata became %v", got)
			}
		})
	}
	leftovers, _ := filepath.Glob(filepath.Join(dir, ".cove-upload-*"))
	if len(leftovers) > 0 {
		t.Errorf("temporary files left: %v", leftovers)
	}
}

// A metadata write the file system refuses fails the upload and leaves the old file, body
// and metadata, as it was. ext4 without ea_inode keeps a file's attributes in one block, so
// one value near the 4 KiB limit does not fit there; file systems that take it skip.
func TestUploadMetadataFailureLeavesTheOldFile(t *testing.T) {
	t.Parallel()
	srv, _ := serveBoth(t)
	dir := t.TempDir()
	needXattrs(t, dir)
	p := filepath.Join(dir, "kept.txt")
	if status, body := upload(t, srv, p, "old", http.Header{"X-Metadata-Keep": {"me"}}); status != 200 {
		t.Fatalf("status %d: %s", status, body)
	}
	big := strings.Repeat("v", filesystem.MaxMetadataSize-len(filesystem.MetadataXattrPrefix)-1)
	status, body := upload(t, srv, p, "new", http.Header{"X-Metadata-K": {big}})
	if status == 200 {
		t.Skipf("the file system of %s stores a %d-byte attribute value", dir, len(big))
	}
	if status != http.StatusInsufficientStorage {
		t.Errorf("status %d (%s), want 507", status, body)
	}
	errorBody(t, status, body)
	if got, _ := os.ReadFile(p); string(got) != "old" {
		t.Errorf("the file became %q", got)
	}
	if got, want := xattrs(t, p), map[string]string{"keep": "me"}; !maps.Equal(got, want) {
		t.Errorf("the metadata became %v, want %v", got, want)
	}
}
