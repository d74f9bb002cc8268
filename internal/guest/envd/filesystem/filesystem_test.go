package filesystem_test

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/cove-dev/cove/internal/guest/envd/filesystem"
	"github.com/cove-dev/cove/internal/guest/envd/identity"
	"github.com/cove-dev/cove/internal/httpx"
	rpc "github.com/cove-dev/cove/sdk/gen/filesystem"
	"github.com/cove-dev/cove/sdk/gen/filesystem/filesystemconnect"
)

type codec struct {
	name string
	opts []connect.ClientOption
}

var codecs = []codec{
	{"json", []connect.ClientOption{connect.WithProtoJSON()}},
	{"binary", nil},
}

// serve starts the service behind a real HTTP server and returns it and one client per codec.
func serve(t *testing.T) (*filesystem.Service, map[string]filesystemconnect.FilesystemClient) {
	t.Helper()
	svc := filesystem.New(&identity.Defaults{})
	mux := http.NewServeMux()
	mux.Handle(filesystemconnect.NewFilesystemHandler(svc))
	srv := httptest.NewServer(httpx.RequestIDs(nil, mux))
	t.Cleanup(func() {
		svc.Close()
		srv.Close()
	})
	clients := map[string]filesystemconnect.FilesystemClient{}
	for _, c := range codecs {
		clients[c.name] = filesystemconnect.NewFilesystemClient(srv.Client(), srv.URL, c.opts...)
	}
	return svc, clients
}

func asUser[T any](msg *T, name string) *connect.Request[T] {
	req := connect.NewRequest(msg)
	if name != "" {
		req.Header().Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(name+":")))
	}
	return req
}

func code(err error) connect.Code {
	if err == nil {
		return 0
	}
	return connect.CodeOf(err)
}

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o640); err != nil {
		t.Fatal(err)
	}
}

func TestStat(t *testing.T) {
	t.Parallel()
	_, clients := serve(t)
	dir := t.TempDir()
	write(t, filepath.Join(dir, "file.txt"), "hello")
	for link, target := range map[string]string{"link": "file.txt", "dirlink": ".", "dangling": "nope"} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	me, _ := user.Current()

	tests := []struct {
		name     string
		path     string
		wantCode connect.Code
		wantType rpc.FileType
		wantSize int64
		wantPerm string
		// wantTarget is the symlink target the entry names, for a link.
		wantTarget string
	}{
		{"a file is described fully", filepath.Join(dir, "file.txt"), 0, rpc.FileType_FILE_TYPE_FILE, 5, "-rw-r-----", ""},
		{"a directory is a directory", dir, 0, rpc.FileType_FILE_TYPE_DIRECTORY, -1, "", ""},
		{"a symlink to a file is followed: a file, naming its target", filepath.Join(dir, "link"), 0, rpc.FileType_FILE_TYPE_FILE, -1, "", filepath.Join(dir, "file.txt")},
		{"a symlink to a directory is followed: a directory, naming its target", filepath.Join(dir, "dirlink"), 0, rpc.FileType_FILE_TYPE_DIRECTORY, -1, "", dir},
		{"a dangling symlink stays a symlink, naming its target", filepath.Join(dir, "dangling"), 0, rpc.FileType_FILE_TYPE_SYMLINK, -1, "", filepath.Join(dir, "nope")},
		{"a missing path is not_found", filepath.Join(dir, "nope"), connect.CodeNotFound, 0, 0, "", ""},
		{"an empty path is invalid_argument", "", connect.CodeInvalidArgument, 0, 0, "", ""},
		{"a path under a file is invalid_argument", filepath.Join(dir, "file.txt", "x"), connect.CodeInvalidArgument, 0, 0, "", ""},
	}
	for _, c := range codecs {
		for _, tt := range tests {
			t.Run(c.name+"/"+tt.name, func(t *testing.T) {
				res, err := clients[c.name].Stat(context.Background(), asUser(&rpc.StatRequest{Path: tt.path}, ""))
				if code(err) != tt.wantCode {
					t.Fatalf("code = %v (%v), want %v", code(err), err, tt.wantCode)
				}
				if err != nil {
					if got := err.Error(); !strings.Contains(got, "(request id ") {
						t.Errorf("error %q does not carry the request id", got)
					}
					return
				}
				e := res.Msg.GetEntry()
				if e.GetType() != tt.wantType || e.GetPath() != tt.path || e.GetName() != filepath.Base(tt.path) {
					t.Errorf("entry = %v", e)
				}
				if tt.wantSize >= 0 && e.GetSize() != tt.wantSize {
					t.Errorf("size = %d, want %d", e.GetSize(), tt.wantSize)
				}
				if tt.wantPerm != "" && (e.GetPermissions() != tt.wantPerm || e.GetMode() != 0o640) {
					t.Errorf("permissions = %q mode %o", e.GetPermissions(), e.GetMode())
				}
				if me != nil && (e.GetOwner() != me.Username || e.GetGroup() == "") {
					t.Errorf("owner/group = %q/%q, want %q", e.GetOwner(), e.GetGroup(), me.Username)
				}
				if e.GetModifiedTime().AsTime().IsZero() {
					t.Error("no modified time")
				}
				if e.GetSymlinkTarget() != tt.wantTarget {
					t.Errorf("symlink target = %q, want %q", e.GetSymlinkTarget(), tt.wantTarget)
				}
				if tt.wantTarget != "" && tt.wantType == rpc.FileType_FILE_TYPE_FILE && e.GetMode() != 0o640 {
					t.Errorf("mode = %o, want the target's 640", e.GetMode())
				}
			})
		}
	}
}

func TestRelativePathsResolveFromHome(t *testing.T) {
	t.Parallel()
	_, clients := serve(t)
	me, err := user.Current()
	if err != nil || me.HomeDir == "" {
		t.Skip("no home directory")
	}
	if _, err := os.Stat(me.HomeDir); err != nil {
		t.Skip("home directory missing")
	}
	for _, p := range []string{"~", "~/", "."} {
		res, err := clients["json"].Stat(context.Background(), asUser(&rpc.StatRequest{Path: p}, me.Username))
		if err != nil {
			t.Fatalf("stat %q: %v", p, err)
		}
		if got := res.Msg.GetEntry().GetPath(); got != filepath.Clean(me.HomeDir) {
			t.Errorf("stat %q path = %q, want %q", p, got, me.HomeDir)
		}
	}
}

func TestMakeDir(t *testing.T) {
	t.Parallel()
	_, clients := serve(t)
	for _, c := range codecs {
		dir := t.TempDir()
		write(t, filepath.Join(dir, "file"), "x")
		tests := []struct {
			name     string
			path     string
			wantCode connect.Code
		}{
			{"missing parents are created", filepath.Join(dir, "a", "b", "c"), 0},
			{"an existing directory is already_exists", dir, connect.CodeAlreadyExists},
			{"a file in the way is invalid_argument", filepath.Join(dir, "file"), connect.CodeInvalidArgument},
			{"a file as a parent is invalid_argument", filepath.Join(dir, "file", "sub"), connect.CodeInvalidArgument},
		}
		for _, tt := range tests {
			t.Run(c.name+"/"+tt.name, func(t *testing.T) {
				res, err := clients[c.name].MakeDir(context.Background(), asUser(&rpc.MakeDirRequest{Path: tt.path}, ""))
				if code(err) != tt.wantCode {
					t.Fatalf("code = %v (%v), want %v", code(err), err, tt.wantCode)
				}
				if err == nil && (res.Msg.GetEntry().GetType() != rpc.FileType_FILE_TYPE_DIRECTORY || res.Msg.GetEntry().GetPath() != tt.path) {
					t.Errorf("entry = %v", res.Msg.GetEntry())
				}
			})
		}
	}
}

func TestMakeDirGivesCreatedDirsToTheUser(t *testing.T) {
	t.Parallel()
	nobody := needNobody(t)
	_, clients := serve(t)
	dir := openDir(t, 0o777)
	p := filepath.Join(dir, "x", "y")
	res, err := clients["json"].MakeDir(context.Background(), asUser(&rpc.MakeDirRequest{Path: p}, "nobody"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Msg.GetEntry().GetOwner() != "nobody" {
		t.Errorf("owner = %q, want nobody", res.Msg.GetEntry().GetOwner())
	}
	for _, d := range []string{filepath.Join(dir, "x"), p} {
		fi, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if uid := strconv.Itoa(int(fi.Sys().(*syscall.Stat_t).Uid)); uid != nobody.Uid {
			t.Errorf("%s uid = %s, want %s", d, uid, nobody.Uid)
		}
	}
}

func TestMove(t *testing.T) {
	t.Parallel()
	_, clients := serve(t)
	for _, c := range codecs {
		dir := t.TempDir()
		write(t, filepath.Join(dir, "src.txt"), "data")
		tests := []struct {
			name     string
			src, dst string
			wantCode connect.Code
		}{
			{"a file moves into a new directory", filepath.Join(dir, "src.txt"), filepath.Join(dir, "new", "dst.txt"), 0},
			{"a missing source is not_found", filepath.Join(dir, "nope"), filepath.Join(dir, "x"), connect.CodeNotFound},
			{"an empty destination is invalid_argument", filepath.Join(dir, "new"), "", connect.CodeInvalidArgument},
		}
		for _, tt := range tests {
			t.Run(c.name+"/"+tt.name, func(t *testing.T) {
				res, err := clients[c.name].Move(context.Background(), asUser(&rpc.MoveRequest{Source: tt.src, Destination: tt.dst}, ""))
				if code(err) != tt.wantCode {
					t.Fatalf("code = %v (%v), want %v", code(err), err, tt.wantCode)
				}
				if err != nil {
					return
				}
				if e := res.Msg.GetEntry(); e.GetPath() != tt.dst || e.GetSize() != 4 {
					t.Errorf("entry = %v", e)
				}
				if _, err := os.Stat(tt.src); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("source still there: %v", err)
				}
			})
		}
	}
}

func TestListDir(t *testing.T) {
	t.Parallel()
	_, clients := serve(t)
	dir := t.TempDir()
	// a/ a/b/ a/b/c/ a/b/c/deep.txt a/b/mid.txt top.txt
	write(t, filepath.Join(dir, "a", "b", "c", "deep.txt"), "x")
	write(t, filepath.Join(dir, "a", "b", "mid.txt"), "x")
	write(t, filepath.Join(dir, "top.txt"), "x")
	if err := os.Symlink(dir, filepath.Join(dir, "loop")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		path     string
		depth    uint32
		want     []string
		wantCode connect.Code
	}{
		{"depth 0 lists direct children", dir, 0, []string{"a", "loop", "top.txt"}, 0},
		{"depth 1 lists direct children", dir, 1, []string{"a", "loop", "top.txt"}, 0},
		{"depth 2 adds grandchildren", dir, 2, []string{"a", "a/b", "loop", "top.txt"}, 0},
		{"depth 4 reaches the bottom without following symlinks", dir, 4,
			[]string{"a", "a/b", "a/b/c", "a/b/c/deep.txt", "a/b/mid.txt", "loop", "top.txt"}, 0},
		{"a symlink to a directory is listed through", filepath.Join(dir, "loop"), 1, []string{"a", "loop", "top.txt"}, 0},
		{"a file is invalid_argument", filepath.Join(dir, "top.txt"), 1, nil, connect.CodeInvalidArgument},
		{"a missing directory is not_found", filepath.Join(dir, "nope"), 1, nil, connect.CodeNotFound},
	}
	for _, c := range codecs {
		for _, tt := range tests {
			t.Run(c.name+"/"+tt.name, func(t *testing.T) {
				res, err := clients[c.name].ListDir(context.Background(), asUser(&rpc.ListDirRequest{Path: tt.path, Depth: tt.depth}, ""))
				if code(err) != tt.wantCode {
					t.Fatalf("code = %v (%v), want %v", code(err), err, tt.wantCode)
				}
				if err != nil {
					return
				}
				var got []string
				for _, e := range res.Msg.GetEntries() {
					rel, _ := filepath.Rel(tt.path, e.GetPath())
					got = append(got, rel)
				}
				if !equal(got, tt.want) {
					t.Errorf("entries = %q, want %q", got, tt.want)
				}
			})
		}
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestRemove(t *testing.T) {
	t.Parallel()
	_, clients := serve(t)
	for _, c := range codecs {
		dir := t.TempDir()
		write(t, filepath.Join(dir, "f.txt"), "x")
		write(t, filepath.Join(dir, "tree", "sub", "f.txt"), "x")
		tests := []struct {
			name     string
			path     string
			wantCode connect.Code
		}{
			{"a file is removed", filepath.Join(dir, "f.txt"), 0},
			{"a directory is removed with its contents", filepath.Join(dir, "tree"), 0},
			{"a missing path succeeds, as in E2B's envd", filepath.Join(dir, "nope"), 0},
			{"a path under a missing directory succeeds", filepath.Join(dir, "nope", "deeper"), 0},
		}
		for _, tt := range tests {
			t.Run(c.name+"/"+tt.name, func(t *testing.T) {
				_, err := clients[c.name].Remove(context.Background(), asUser(&rpc.RemoveRequest{Path: tt.path}, ""))
				if code(err) != tt.wantCode {
					t.Fatalf("code = %v (%v), want %v", code(err), err, tt.wantCode)
				}
				if _, err := os.Lstat(tt.path); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s still there", tt.path)
				}
			})
		}
	}
}

// receive returns the next event of a WatchDir stream that is not a keepalive, or fails
// after a few seconds.
func receive(t *testing.T, stream *connect.ServerStreamForClient[rpc.WatchDirResponse]) *rpc.WatchDirResponse {
	t.Helper()
	for stream.Receive() {
		if stream.Msg().GetKeepalive() != nil {
			continue
		}
		return stream.Msg()
	}
	t.Fatalf("stream ended: %v", stream.Err())
	return nil
}

type want struct {
	name string
	typ  rpc.EventType
}

// await reads events until every wanted one was seen.
func await(t *testing.T, stream *connect.ServerStreamForClient[rpc.WatchDirResponse], wants ...want) []*rpc.FilesystemEvent {
	t.Helper()
	var seen []*rpc.FilesystemEvent
	missing := map[want]bool{}
	for _, w := range wants {
		missing[w] = true
	}
	for len(missing) > 0 {
		ev := receive(t, stream).GetFilesystem()
		if ev == nil {
			t.Fatalf("got a non-filesystem event")
		}
		seen = append(seen, ev)
		delete(missing, want{ev.GetName(), ev.GetType()})
	}
	return seen
}

func TestWatchDir(t *testing.T) {
	t.Parallel()
	_, clients := serve(t)
	for _, c := range codecs {
		t.Run(c.name+"/recursive watch sees a file in a new subdirectory", func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			stream, err := clients[c.name].WatchDir(ctx, asUser(&rpc.WatchDirRequest{Path: dir, Recursive: true, IncludeEntry: true}, ""))
			if err != nil {
				t.Fatal(err)
			}
			defer stream.Close()
			if receive(t, stream).GetStart() == nil {
				t.Fatal("first event is not start")
			}
			write(t, filepath.Join(dir, "sub", "deeper", "f.txt"), "hello")
			evs := await(t, stream,
				want{"sub", rpc.EventType_EVENT_TYPE_CREATE},
				want{"sub/deeper/f.txt", rpc.EventType_EVENT_TYPE_CREATE})
			for _, ev := range evs {
				if ev.GetName() == "sub" && ev.GetEntry().GetType() != rpc.FileType_FILE_TYPE_DIRECTORY {
					t.Errorf("entry of sub = %v", ev.GetEntry())
				}
			}
			// A later change deep down is still seen once the tree is watched.
			write(t, filepath.Join(dir, "sub", "deeper", "g.txt"), "more")
			await(t, stream, want{"sub/deeper/g.txt", rpc.EventType_EVENT_TYPE_WRITE})
		})
		t.Run(c.name+"/flat watch reports write, rename and remove without entries", func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			stream, err := clients[c.name].WatchDir(ctx, asUser(&rpc.WatchDirRequest{Path: dir}, ""))
			if err != nil {
				t.Fatal(err)
			}
			defer stream.Close()
			receive(t, stream)
			p := filepath.Join(dir, "a.txt")
			write(t, p, "1")
			if err := os.Rename(p, filepath.Join(dir, "b.txt")); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(filepath.Join(dir, "b.txt")); err != nil {
				t.Fatal(err)
			}
			evs := await(t, stream,
				want{"a.txt", rpc.EventType_EVENT_TYPE_CREATE},
				want{"a.txt", rpc.EventType_EVENT_TYPE_WRITE},
				want{"a.txt", rpc.EventType_EVENT_TYPE_RENAME},
				want{"b.txt", rpc.EventType_EVENT_TYPE_REMOVE})
			for _, ev := range evs {
				if ev.Entry != nil {
					t.Errorf("entry sent without include_entry: %v", ev)
				}
			}
		})
	}
	t.Run("keepalive arrives at the requested interval", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req := asUser(&rpc.WatchDirRequest{Path: t.TempDir()}, "")
		req.Header().Set(filesystem.KeepaliveHeader, "1")
		stream, err := clients["json"].WatchDir(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		defer stream.Close()
		for i, check := range []func(*rpc.WatchDirResponse) bool{
			func(m *rpc.WatchDirResponse) bool { return m.GetStart() != nil },
			func(m *rpc.WatchDirResponse) bool { return m.GetKeepalive() != nil },
		} {
			if !stream.Receive() {
				t.Fatalf("stream ended: %v", stream.Err())
			}
			if !check(stream.Msg()) {
				t.Fatalf("message %d = %v", i, stream.Msg())
			}
		}
	})
	errs := []struct {
		name     string
		path     func(dir string) string
		wantCode connect.Code
	}{
		{"a missing directory is not_found", func(dir string) string { return filepath.Join(dir, "nope") }, connect.CodeNotFound},
		{"a file is invalid_argument", func(dir string) string {
			write(t, filepath.Join(dir, "f"), "")
			return filepath.Join(dir, "f")
		}, connect.CodeInvalidArgument},
	}
	for _, tt := range errs {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			stream, err := clients["json"].WatchDir(context.Background(), asUser(&rpc.WatchDirRequest{Path: tt.path(t.TempDir())}, ""))
			if err == nil {
				for stream.Receive() {
				}
				err = stream.Err()
				stream.Close()
			}
			if code(err) != tt.wantCode {
				t.Fatalf("code = %v (%v), want %v", code(err), err, tt.wantCode)
			}
		})
	}
}

func TestCloseEndsOpenStreams(t *testing.T) {
	t.Parallel()
	svc, clients := serve(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stream, err := clients["binary"].WatchDir(ctx, asUser(&rpc.WatchDirRequest{Path: t.TempDir()}, ""))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	receive(t, stream)
	svc.Close()
	for stream.Receive() {
	}
	if code(stream.Err()) != connect.CodeUnavailable {
		t.Fatalf("stream end = %v, want unavailable", stream.Err())
	}
	_, err = clients["binary"].CreateWatcher(ctx, asUser(&rpc.CreateWatcherRequest{Path: t.TempDir()}, ""))
	if code(err) != connect.CodeUnavailable {
		t.Fatalf("create after close = %v, want unavailable", err)
	}
}

func TestWatcherPolling(t *testing.T) {
	t.Parallel()
	_, clients := serve(t)
	for _, c := range codecs {
		t.Run(c.name+"/events are buffered until polled, then the watcher is removed", func(t *testing.T) {
			t.Parallel()
			client := clients[c.name]
			ctx := context.Background()
			dir := t.TempDir()
			res, err := client.CreateWatcher(ctx, asUser(&rpc.CreateWatcherRequest{Path: dir, Recursive: true}, ""))
			if err != nil {
				t.Fatal(err)
			}
			id := res.Msg.GetWatcherId()
			other, err := client.CreateWatcher(ctx, asUser(&rpc.CreateWatcherRequest{Path: dir}, ""))
			if err != nil {
				t.Fatal(err)
			}
			if other.Msg.GetWatcherId() == id || id == "" {
				t.Fatalf("watcher ids %q and %q are not unique", id, other.Msg.GetWatcherId())
			}
			write(t, filepath.Join(dir, "new", "f.txt"), "x")

			seen := map[string]bool{}
			deadline := time.Now().Add(5 * time.Second)
			for !seen["new/f.txt"] && time.Now().Before(deadline) {
				evs, err := client.GetWatcherEvents(ctx, asUser(&rpc.GetWatcherEventsRequest{WatcherId: id}, ""))
				if err != nil {
					t.Fatal(err)
				}
				for _, ev := range evs.Msg.GetEvents() {
					seen[ev.GetName()] = true
				}
				time.Sleep(20 * time.Millisecond)
			}
			if !seen["new"] || !seen["new/f.txt"] {
				t.Fatalf("events seen = %v", seen)
			}
			if _, err := client.RemoveWatcher(ctx, asUser(&rpc.RemoveWatcherRequest{WatcherId: id}, "")); err != nil {
				t.Fatal(err)
			}
			for name, call := range map[string]func() error{
				"get": func() error {
					_, err := client.GetWatcherEvents(ctx, asUser(&rpc.GetWatcherEventsRequest{WatcherId: id}, ""))
					return err
				},
				"remove": func() error {
					_, err := client.RemoveWatcher(ctx, asUser(&rpc.RemoveWatcherRequest{WatcherId: id}, ""))
					return err
				},
			} {
				if err := call(); code(err) != connect.CodeNotFound {
					t.Errorf("%s of a removed watcher = %v, want not_found", name, err)
				}
			}
		})
	}
}
