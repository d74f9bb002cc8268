package files_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/cove-dev/cove/internal/guest/envd/files"
	"github.com/cove-dev/cove/internal/guest/envd/identity"
	"github.com/cove-dev/cove/internal/httpx"
	rpc "github.com/cove-dev/cove/sdk/gen/filesystem"
)

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// watchEvents reads a WatchDir stream until an event names marker, and returns the event
// types seen per name, in order.
func watchEvents(t *testing.T, stream *connect.ServerStreamForClient[rpc.WatchDirResponse], marker string) map[string][]rpc.EventType {
	t.Helper()
	seen := map[string][]rpc.EventType{}
	for stream.Receive() {
		ev := stream.Msg().GetFilesystem()
		if ev == nil {
			continue // start, keepalive
		}
		if ev.GetName() == marker {
			return seen
		}
		seen[ev.GetName()] = append(seen[ev.GetName()], ev.GetType())
	}
	t.Fatalf("the watch stream ended before the marker's event: %v (seen %v)", stream.Err(), seen)
	return nil
}

// TestUploadWritesTheFileInPlace uploads over an existing file and to a new one while the
// directory is watched through the WatchDir RPC, as the SDK's watchDir does: the existing
// file keeps its inode and shows WRITE only, the new one CREATE then WRITE, as with E2B's envd.
func TestUploadWritesTheFileInPlace(t *testing.T) {
	t.Parallel()
	srv, client := serveBoth(t)
	dir := t.TempDir()
	old := filepath.Join(dir, "old.txt")
	if err := os.WriteFile(old, []byte("the old content, longer than the new"), 0o640); err != nil {
		t.Fatal(err)
	}
	ino := inode(t, old)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := client.WatchDir(ctx, connect.NewRequest(&rpc.WatchDirRequest{Path: dir}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() || stream.Msg().GetStart() == nil {
		t.Fatalf("no start event: %v", stream.Err())
	}

	for _, p := range []string{old, filepath.Join(dir, "new.txt"), filepath.Join(dir, "zz-marker")} {
		if status, body := upload(t, srv, p, "new", nil); status != http.StatusOK {
			t.Fatalf("upload %s: %d %s", p, status, body)
		}
	}
	seen := watchEvents(t, stream, "zz-marker")
	write, create := rpc.EventType_EVENT_TYPE_WRITE, rpc.EventType_EVENT_TYPE_CREATE

	t.Run("an existing file shows WRITE events only", func(t *testing.T) {
		evs := seen["old.txt"]
		if len(evs) == 0 {
			t.Fatalf("no event for old.txt; seen %v", seen)
		}
		for _, e := range evs {
			if e != write {
				t.Errorf("old.txt events %v, want WRITE only", evs)
				break
			}
		}
	})
	t.Run("an existing file keeps its inode and mode and gets the new content", func(t *testing.T) {
		if got := inode(t, old); got != ino {
			t.Errorf("inode %d, want %d (the file was replaced)", got, ino)
		}
		if fi, _ := os.Stat(old); fi.Mode().Perm() != 0o640 {
			t.Errorf("mode %v, want 0640", fi.Mode().Perm())
		}
		if b, _ := os.ReadFile(old); string(b) != "new" {
			t.Errorf("content %q, want %q", b, "new")
		}
	})
	t.Run("a new file shows CREATE, then WRITE", func(t *testing.T) {
		evs := seen["new.txt"]
		if len(evs) < 2 || evs[0] != create || evs[len(evs)-1] != write {
			t.Errorf("new.txt events %v, want CREATE first and WRITE last", evs)
		}
	})
	t.Run("no other name shows", func(t *testing.T) {
		for name := range seen {
			if name != "old.txt" && name != "new.txt" {
				t.Errorf("events %v for %q, which was never uploaded", seen[name], name)
			}
		}
	})
}

// TestCutUploadLeavesTheOldFile sends an upload whose body ends before its Content-Length
// (the client went away): the target keeps its content and inode, and a new target is not made.
func TestCutUploadLeavesTheOldFile(t *testing.T) {
	t.Parallel()
	handled := make(chan struct{}, 4)
	d := &identity.Defaults{}
	h := files.New(d)
	srv := httptest.NewServer(httpx.RequestIDs(nil, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() { handled <- struct{}{} }()
		h.ServeHTTP(w, r)
	})))
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	old := filepath.Join(dir, "kept.txt")
	if err := os.WriteFile(old, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	ino := inode(t, old)

	for _, target := range []string{old, filepath.Join(dir, "never.txt")} {
		conn, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		q := url.Values{"path": {target}}
		body := strings.Repeat("x", 64<<10)
		fmt.Fprintf(conn, "POST /files?%s HTTP/1.1\r\nHost: envd\r\nContent-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\n%s",
			q.Encode(), 10*len(body), body)
		conn.(*net.TCPConn).CloseWrite()
		_, _ = io.Copy(io.Discard, conn) // the answer, if any
		conn.Close()
		select {
		case <-handled:
		case <-time.After(30 * time.Second):
			t.Fatal("the cut upload was not handled within 30 s")
		}
	}
	if b, _ := os.ReadFile(old); string(b) != "old" {
		t.Errorf("content %q after a cut upload, want %q", b, "old")
	}
	if got := inode(t, old); got != ino {
		t.Errorf("inode %d, want %d", got, ino)
	}
	if _, err := os.Stat(filepath.Join(dir, "never.txt")); !os.IsNotExist(err) {
		t.Errorf("a cut upload of a new file left it behind: %v", err)
	}
}

// TestUploadThroughASymlink writes through a symlink at the target, as opening it would: the
// link stays, and its target, existing or not, gets the content.
func TestUploadThroughASymlink(t *testing.T) {
	t.Parallel()
	srv := serve(t, "")
	dir := t.TempDir()
	real := filepath.Join(dir, "real.txt")
	if err := os.WriteFile(real, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	ino := inode(t, real)
	links := map[string]string{"to-real": real, "dangling": filepath.Join(dir, "made-through-link.txt")}
	for link, target := range links {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range links {
		t.Run(link, func(t *testing.T) {
			p := filepath.Join(dir, link)
			req, _ := http.NewRequest(http.MethodPost, fileURL(srv, url.Values{"path": {p}}), strings.NewReader("via "+link))
			req.Header.Set("Content-Type", "application/octet-stream")
			if res, body := do(t, req); res.StatusCode != http.StatusOK {
				t.Fatalf("upload: %d %s", res.StatusCode, body)
			}
			if fi, err := os.Lstat(p); err != nil || fi.Mode()&os.ModeSymlink == 0 {
				t.Errorf("%s is no longer a symlink (%v)", link, err)
			}
			if b, err := os.ReadFile(target); err != nil || string(b) != "via "+link {
				t.Errorf("target content %q (%v)", b, err)
			}
		})
	}
	if got := inode(t, real); got != ino {
		t.Errorf("the link's existing target was replaced: inode %d, want %d", got, ino)
	}
}
