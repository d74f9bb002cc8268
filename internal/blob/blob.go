// Package blob is where Cove keeps its large, immutable files: template layers, build
// contexts, snapshot images (CRIU checkpoints and files) and volume images. One interface,
// two homes: a directory under the data dir (the one-box default) or an S3 bucket shared by
// the nodes of a cluster, with a bounded local cache on each node (Cache).
//
// The one idea: a blob is visible whole or not at all. Put writes to a temporary name (a file
// beside the target, or an S3 multipart upload) and publishes it in one step (a rename, or
// the multipart completion); a failed or cut Put leaves nothing a reader can see.
package blob

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/cove-dev/cove/internal/errdefs"
)

// Errors callers branch on.
var (
	// ErrNotFound: no blob under that key.
	ErrNotFound = errdefs.New(errdefs.ErrNotFound, "blob not found")
	// ErrInvalid: a bad key, range or store address.
	ErrInvalid = errdefs.New(errdefs.ErrInvalidArgument, "invalid blob request")
)

// Info describes a stored blob.
type Info struct {
	Key     string
	Size    int64
	ModTime time.Time
	// ETag is the object store's tag of this version of the blob ("" where the store has
	// none, a directory): with Size and ModTime, what tells one version from the next.
	ETag string
}

// Same says whether a and b describe one version of a blob.
func (a Info) Same(b Info) bool {
	return a.Size == b.Size && a.ModTime.Equal(b.ModTime) && a.ETag == b.ETag
}

// Store keeps blobs by key. Keys are slash-separated paths of [A-Za-z0-9._-] segments
// ("templates/tpl_x/layer-ab12.tar"); a segment is never "." or "..". Safe for concurrent use.
type Store interface {
	// Put stores what r yields under key, replacing any blob there, visible only once whole.
	// size is r's length when known, -1 otherwise.
	Put(ctx context.Context, key string, r io.Reader, size int64) error
	// Get opens the blob for reading; ErrNotFound when there is none.
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	// GetRange opens n bytes of the blob from off (to its end when n < 0).
	GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error)
	// Stat describes the blob; ErrNotFound when there is none.
	Stat(ctx context.Context, key string) (Info, error)
	// Delete removes the blob; none is not an error.
	Delete(ctx context.Context, key string) error
	// List returns the blobs whose keys start with prefix, by key.
	List(ctx context.Context, prefix string) ([]Info, error)
}

var validSegment = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`) })

// CheckKey reports whether key can name a blob.
func CheckKey(key string) error {
	if key == "" || len(key) > 1024 {
		return fmt.Errorf("%w: key %q: 1 to 1024 bytes", ErrInvalid, key)
	}
	for seg := range strings.SplitSeq(key, "/") {
		if seg == "." || seg == ".." || !validSegment().MatchString(seg) {
			return fmt.Errorf("%w: key %q: segments are 1-128 of [A-Za-z0-9._-], never \".\" or \"..\"", ErrInvalid, key)
		}
	}
	return nil
}

// Open opens the store an address names: "" is the directory <dataDir>/blobs;
// "file:///abs/dir" a directory; "s3://BUCKET?endpoint=URL&region=R" a bucket (path-style,
// credentials from the standard AWS environment variables), with a local cache of cacheBytes
// under <dataDir>/blob-cache when cacheBytes > 0.
func Open(ctx context.Context, addr, dataDir string, cacheBytes int64) (Store, error) {
	if addr == "" {
		return OpenDir(filepath.Join(dataDir, "blobs"))
	}
	u, err := url.Parse(addr)
	if err != nil {
		return nil, fmt.Errorf("%w: objects address %q: %v", ErrInvalid, addr, err)
	}
	switch u.Scheme {
	case "file":
		if !filepath.IsAbs(u.Path) {
			return nil, fmt.Errorf("%w: objects address %q: a file address needs an absolute path", ErrInvalid, addr)
		}
		return OpenDir(u.Path)
	case "s3":
		s, err := OpenS3(ctx, S3Config{Bucket: u.Host, Endpoint: u.Query().Get("endpoint"), Region: u.Query().Get("region"),
			Prefix: strings.Trim(u.Path, "/")})
		if err != nil {
			return nil, err
		}
		if cacheBytes <= 0 {
			return s, nil
		}
		return NewCache(s, filepath.Join(dataDir, "blob-cache"), cacheBytes)
	}
	return nil, fmt.Errorf("%w: objects address %q: the scheme must be s3 or file", ErrInvalid, addr)
}
