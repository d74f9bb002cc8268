package blob_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/cove-dev/cove/internal/blob"
	"github.com/cove-dev/cove/internal/blob/blobtest"
)

func random(t testing.TB, n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

// read returns a function that reads a Get's blob whole, failing the test on an error.
func read(t testing.TB) func(io.ReadCloser, error) []byte {
	return func(rc io.ReadCloser, err error) []byte {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		b, err := io.ReadAll(rc)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
}

// failingReader yields n bytes of b, then fails: a client or disk that dies mid-upload.
type failingReader struct {
	r io.Reader
}

func (f *failingReader) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if errors.Is(err, io.EOF) {
		return n, errors.New("the uploader died")
	}
	return n, err
}

// conformance runs what every blob store must do, whatever its home.
func conformance(t *testing.T, s blob.Store) {
	ctx := context.Background()
	big := random(t, 12<<20+123) // more than two parts of the S3 store's 5 MiB test part size
	t.Run("a blob reads back whole, by range and in listings", func(t *testing.T) {
		if err := s.Put(ctx, "templates/tpl_1/layer.tar", bytes.NewReader(big), int64(len(big))); err != nil {
			t.Fatal(err)
		}
		if got := read(t)(s.Get(ctx, "templates/tpl_1/layer.tar")); !bytes.Equal(got, big) {
			t.Fatalf("read %d bytes back, want %d equal", len(got), len(big))
		}
		if got := read(t)(s.GetRange(ctx, "templates/tpl_1/layer.tar", 5<<20, 1000)); !bytes.Equal(got, big[5<<20:5<<20+1000]) {
			t.Fatal("a range reads other bytes")
		}
		if got := read(t)(s.GetRange(ctx, "templates/tpl_1/layer.tar", int64(len(big))-7, -1)); !bytes.Equal(got, big[len(big)-7:]) {
			t.Fatal("a range to the end reads other bytes")
		}
		if in, err := s.Stat(ctx, "templates/tpl_1/layer.tar"); err != nil || in.Size != int64(len(big)) {
			t.Fatalf("stat %+v %v", in, err)
		}
		if err := s.Put(ctx, "templates/tpl_2/layer.tar", strings.NewReader("two"), -1); err != nil {
			t.Fatal(err)
		}
		if err := s.Put(ctx, "snapshots/snap_1/pages.img", strings.NewReader("pages"), 5); err != nil {
			t.Fatal(err)
		}
		list, err := s.List(ctx, "templates/")
		if err != nil || len(list) != 2 || list[0].Key != "templates/tpl_1/layer.tar" || list[1].Key != "templates/tpl_2/layer.tar" || list[1].Size != 3 {
			t.Fatalf("list %+v %v", list, err)
		}
	})
	t.Run("a put replaces the blob", func(t *testing.T) {
		if err := s.Put(ctx, "templates/tpl_2/layer.tar", strings.NewReader("second"), 6); err != nil {
			t.Fatal(err)
		}
		if got := read(t)(s.Get(ctx, "templates/tpl_2/layer.tar")); string(got) != "second" {
			t.Fatalf("read %q", got)
		}
	})
	t.Run("a put cut short is never visible and leaves the old blob whole", func(t *testing.T) {
		err := s.Put(ctx, "volumes/vol_1/image", &failingReader{bytes.NewReader(big)}, -1)
		if err == nil {
			t.Fatal("a failing reader's put succeeded")
		}
		if _, err := s.Stat(ctx, "volumes/vol_1/image"); !errors.Is(err, blob.ErrNotFound) {
			t.Fatalf("the cut blob is visible: %v", err)
		}
		if err := s.Put(ctx, "templates/tpl_1/layer.tar", &failingReader{bytes.NewReader(big[:6<<20])}, -1); err == nil {
			t.Fatal("a failing reader's put succeeded")
		}
		if got := read(t)(s.Get(ctx, "templates/tpl_1/layer.tar")); !bytes.Equal(got, big) {
			t.Fatal("a failed put over a blob changed it")
		}
		if err := s.Put(ctx, "volumes/vol_2/image", bytes.NewReader(big[:100]), 200); err == nil {
			t.Fatal("a put shorter than announced succeeded")
		}
		if _, err := s.Stat(ctx, "volumes/vol_2/image"); !errors.Is(err, blob.ErrNotFound) {
			t.Fatalf("the short blob is visible: %v", err)
		}
		if list, _ := s.List(ctx, "volumes/"); len(list) != 0 {
			t.Fatalf("listing shows %+v", list)
		}
	})
	t.Run("a deleted blob is not found; deleting it again is no error", func(t *testing.T) {
		if err := s.Delete(ctx, "snapshots/snap_1/pages.img"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Get(ctx, "snapshots/snap_1/pages.img"); !errors.Is(err, blob.ErrNotFound) {
			t.Fatalf("get after delete: %v", err)
		}
		if _, err := s.Stat(ctx, "snapshots/snap_1/pages.img"); !errors.Is(err, blob.ErrNotFound) {
			t.Fatalf("stat after delete: %v", err)
		}
		if err := s.Delete(ctx, "snapshots/snap_1/pages.img"); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("keys that could leave the store are refused", func(t *testing.T) {
		for _, key := range []string{"", "../etc/passwd", "/abs", "a//b", "a/./b", "a/../b", "sp ace", "a/"} {
			if err := s.Put(ctx, key, strings.NewReader("x"), 1); !errors.Is(err, blob.ErrInvalid) {
				t.Errorf("put %q: %v", key, err)
			}
			if _, err := s.Get(ctx, key); !errors.Is(err, blob.ErrInvalid) {
				t.Errorf("get %q: %v", key, err)
			}
		}
	})
}

func TestDir(t *testing.T) {
	s, err := blob.Open(context.Background(), "", t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	conformance(t, s)
}

func openS3(t *testing.T) (*blob.S3, *blobtest.Server) {
	t.Helper()
	srv := blobtest.Start(t, "", "cove")
	s, err := blob.OpenS3(context.Background(), blob.S3Config{Bucket: "cove", Endpoint: srv.Endpoint, Prefix: "node-test", PartSize: 5 << 20})
	if err != nil {
		t.Fatal(err)
	}
	return s, srv
}

func TestS3(t *testing.T) {
	s, srv := openS3(t)
	conformance(t, s)
	t.Run("a large put goes up in parts", func(t *testing.T) {
		// The ETag of a multipart upload is the parts' hash, suffixed with their count.
		cfg, err := config.LoadDefaultConfig(context.Background(), config.WithRegion("us-east-1"))
		if err != nil {
			t.Fatal(err)
		}
		raw := s3.NewFromConfig(cfg, func(o *s3.Options) { o.UsePathStyle, o.BaseEndpoint = true, aws.String(srv.Endpoint) })
		head, err := raw.HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: aws.String("cove"), Key: aws.String("node-test/templates/tpl_1/layer.tar")})
		if err != nil {
			t.Fatal(err)
		}
		if etag := aws.ToString(head.ETag); !strings.HasSuffix(strings.Trim(etag, `"`), "-3") {
			t.Errorf("ETag %s: want a 3-part upload", etag)
		}
		ups, err := raw.ListMultipartUploads(context.Background(), &s3.ListMultipartUploadsInput{Bucket: aws.String("cove")})
		if err != nil {
			t.Fatal(err)
		}
		if len(ups.Uploads) != 0 {
			t.Errorf("%d multipart uploads left open after failed puts", len(ups.Uploads))
		}
	})
	t.Run("an unreachable bucket fails at open, naming it", func(t *testing.T) {
		_, err := blob.OpenS3(context.Background(), blob.S3Config{Bucket: "absent", Endpoint: srv.Endpoint})
		if err == nil || !strings.Contains(err.Error(), "absent") {
			t.Fatalf("open of a missing bucket: %v", err)
		}
	})
}

func TestCacheOverS3(t *testing.T) {
	remote, _ := openS3(t)
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "cache")
	c, err := blob.NewCache(remote, dir, 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	conformance(t, c)

	t.Run("a get that misses fills the cache, and the next is served from it", func(t *testing.T) {
		body := random(t, 1<<20)
		if err := remote.Put(ctx, "templates/tpl_9/layer.tar", bytes.NewReader(body), -1); err != nil {
			t.Fatal(err)
		}
		if c.Cached("templates/tpl_9/layer.tar") {
			t.Fatal("cached before any read")
		}
		if got := read(t)(c.Get(ctx, "templates/tpl_9/layer.tar")); !bytes.Equal(got, body) {
			t.Fatal("first read differs")
		}
		if got := read(t)(c.Get(ctx, "templates/tpl_9/layer.tar")); !bytes.Equal(got, body) || !c.Cached("templates/tpl_9/layer.tar") {
			t.Fatal("the cached read differs")
		}
		// Gone from the bucket behind the cache's back (another node deleted it): gone here
		// too, never served from the copy.
		if err := remote.Delete(ctx, "templates/tpl_9/layer.tar"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Get(ctx, "templates/tpl_9/layer.tar"); !errors.Is(err, blob.ErrNotFound) {
			t.Fatalf("a blob deleted from the bucket reads from the cache: %v", err)
		}
		if c.Cached("templates/tpl_9/layer.tar") {
			t.Error("the copy of a deleted blob stays cached")
		}
	})
	t.Run("a blob another node put again is read in its new version, never the cached old one", func(t *testing.T) {
		other, err := blob.NewCache(remote, filepath.Join(t.TempDir(), "other-node"), 64<<20)
		if err != nil {
			t.Fatal(err)
		}
		key := "sandboxes/isb1/checkpoint.tar"
		for i, put := range []struct {
			by   *blob.Cache
			body []byte
		}{
			{c, []byte("the first checkpoint, taken here")},
			{other, []byte("the second checkpoint, elsewhere")}, // same size: the version tells them apart
			{c, []byte("the third checkpoint, back here.")},
		} {
			if err := put.by.Put(ctx, key, bytes.NewReader(put.body), int64(len(put.body))); err != nil {
				t.Fatal(err)
			}
			for _, reader := range []*blob.Cache{c, other} {
				if got := read(t)(reader.Get(ctx, key)); !bytes.Equal(got, put.body) {
					t.Fatalf("put %d: read %q, want %q", i, got, put.body)
				}
				if got := read(t)(reader.GetRange(ctx, key, 4, 6)); !bytes.Equal(got, put.body[4:10]) {
					t.Fatalf("put %d: ranged read %q, want %q", i, got, put.body[4:10])
				}
			}
		}
	})
	t.Run("a ranged read that misses does not fill the cache", func(t *testing.T) {
		if err := remote.Put(ctx, "snapshots/s/pages", bytes.NewReader(random(t, 4096)), -1); err != nil {
			t.Fatal(err)
		}
		read(t)(c.GetRange(ctx, "snapshots/s/pages", 10, 10))
		if c.Cached("snapshots/s/pages") {
			t.Fatal("a ranged read cached the blob")
		}
	})
	t.Run("the cache stays under its bound, the least recently used going first", func(t *testing.T) {
		small, err := blob.NewCache(remote, filepath.Join(t.TempDir(), "small"), 3<<20)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"a/1", "a/2", "a/3"} {
			if err := small.Put(ctx, k, bytes.NewReader(random(t, 1<<20)), -1); err != nil {
				t.Fatal(err)
			}
		}
		read(t)(small.Get(ctx, "a/1")) // a/2 is now the least recently used
		if err := small.Put(ctx, "a/4", bytes.NewReader(random(t, 1<<20)), -1); err != nil {
			t.Fatal(err)
		}
		if small.Used() > 3<<20 || small.Cached("a/2") || !small.Cached("a/1") || !small.Cached("a/4") {
			t.Fatalf("used %d; cached a/1 %v a/2 %v a/4 %v", small.Used(), small.Cached("a/1"), small.Cached("a/2"), small.Cached("a/4"))
		}
		if got := read(t)(small.Get(ctx, "a/2")); len(got) != 1<<20 {
			t.Fatal("an evicted blob does not read back from the remote")
		}
	})
}
