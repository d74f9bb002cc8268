package filesystem_test

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/internal/guest/envd/filesystem"
	rpc "github.com/cove-dev/cove/sdk/gen/filesystem"
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

func setMeta(t *testing.T, path string, md map[string]string) {
	t.Helper()
	for k, v := range md {
		if err := unix.Setxattr(path, "user.e2b."+k, []byte(v), 0); err != nil {
			t.Fatal(err)
		}
	}
}

func TestEntryMetadata(t *testing.T) {
	t.Parallel()
	_, clients := serve(t)
	for _, c := range codecs {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			needXattrs(t, dir)
			client := clients[c.name]
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()

			md := map[string]string{"owner": "team-a", "x.y": "1 2", "empty": ""}
			f := filepath.Join(dir, "f.txt")
			write(t, f, "data")
			setMeta(t, f, md)
			// Attributes of other namespaces or prefixes are not metadata.
			if err := unix.Setxattr(f, "user.other", []byte("no"), 0); err != nil {
				t.Fatal(err)
			}
			write(t, filepath.Join(dir, "plain.txt"), "x")
			if err := os.Symlink(f, filepath.Join(dir, "link")); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(filepath.Join(dir, "gone"), filepath.Join(dir, "dangling")); err != nil {
				t.Fatal(err)
			}

			st, err := client.Stat(ctx, asUser(&rpc.StatRequest{Path: f}, ""))
			if err != nil {
				t.Fatal(err)
			}
			if got := st.Msg.GetEntry().GetMetadata(); !maps.Equal(got, md) {
				t.Errorf("Stat metadata = %v, want %v", got, md)
			}

			ls, err := client.ListDir(ctx, asUser(&rpc.ListDirRequest{Path: dir}, ""))
			if err != nil {
				t.Fatal(err)
			}
			wants := map[string]map[string]string{"f.txt": md, "plain.txt": {}, "link": md, "dangling": {}}
			for _, e := range ls.Msg.GetEntries() {
				if want, ok := wants[e.GetName()]; ok {
					if !maps.Equal(e.GetMetadata(), want) {
						t.Errorf("ListDir %s metadata = %v, want %v", e.GetName(), e.GetMetadata(), want)
					}
					delete(wants, e.GetName())
				}
			}
			if len(wants) > 0 {
				t.Errorf("ListDir missed %v", wants)
			}

			// A symlink shows its target's metadata (Linux keeps none on the link itself).
			st, err = client.Stat(ctx, asUser(&rpc.StatRequest{Path: filepath.Join(dir, "link")}, ""))
			if err != nil {
				t.Fatal(err)
			}
			if e := st.Msg.GetEntry(); e.GetType() != rpc.FileType_FILE_TYPE_FILE || !maps.Equal(e.GetMetadata(), md) {
				t.Errorf("Stat of the link = type %v metadata %v, want the target's type (file) with %v", e.GetType(), e.GetMetadata(), md)
			}

			// Move keeps the attributes and reports them.
			mv, err := client.Move(ctx, asUser(&rpc.MoveRequest{Source: f, Destination: filepath.Join(dir, "moved", "g.txt")}, ""))
			if err != nil {
				t.Fatal(err)
			}
			if got := mv.Msg.GetEntry().GetMetadata(); !maps.Equal(got, md) {
				t.Errorf("Move metadata = %v, want %v", got, md)
			}

			// A new directory has none.
			mk, err := client.MakeDir(ctx, asUser(&rpc.MakeDirRequest{Path: filepath.Join(dir, "newdir")}, ""))
			if err != nil {
				t.Fatal(err)
			}
			if got := mk.Msg.GetEntry().GetMetadata(); len(got) != 0 {
				t.Errorf("MakeDir metadata = %v, want none", got)
			}
		})
	}
}

func TestWatchDirEntryMetadata(t *testing.T) {
	t.Parallel()
	_, clients := serve(t)
	dir := t.TempDir()
	needXattrs(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := clients["json"].WatchDir(ctx, asUser(&rpc.WatchDirRequest{Path: dir, IncludeEntry: true}, ""))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if receive(t, stream).GetStart() == nil {
		t.Fatal("first event is not start")
	}
	// Set the attributes on a file outside the watched directory, then move it in: the
	// create event's entry carries them.
	outside := filepath.Join(t.TempDir(), "m.txt")
	write(t, outside, "x")
	md := map[string]string{"k": "v"}
	setMeta(t, outside, md)
	if err := os.Rename(outside, filepath.Join(dir, "m.txt")); err != nil {
		t.Fatal(err)
	}
	for _, ev := range await(t, stream, want{"m.txt", rpc.EventType_EVENT_TYPE_CREATE}) {
		if ev.GetName() == "m.txt" && ev.GetType() == rpc.EventType_EVENT_TYPE_CREATE && !maps.Equal(ev.GetEntry().GetMetadata(), md) {
			t.Errorf("event entry metadata = %v, want %v", ev.GetEntry().GetMetadata(), md)
		}
	}
}

func TestReadMetadataOfAMissingFileIsEmpty(t *testing.T) {
	t.Parallel()
	if got := filesystem.ReadMetadata(filepath.Join(t.TempDir(), "nope")); got == nil || len(got) != 0 {
		t.Errorf("ReadMetadata = %#v, want an empty map", got)
	}
}
