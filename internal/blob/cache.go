package blob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

// Cache keeps whole copies of a remote store's blobs in a local directory, at most max bytes,
// the least recently used going first. Blobs under a cache are written once: a key names one
// content for good (a new version is a new key), so a cached copy is never stale on another
// node. A Put goes to the remote and, on the same pass, into the cache; a Get that misses
// downloads the blob whole into the cache first; a ranged read that misses reads the range
// from the remote without caching it (the cheaper move for a part of a big blob).
type Cache struct {
	remote Store
	dir    *Dir
	max    int64

	mu    sync.Mutex
	used  int64
	items map[string]*cached
}

type cached struct {
	size   int64
	last   time.Time
	remote Info // the version of the remote's blob the copy is of; zero: unknown (kept from before a restart)
}

var _ Store = (*Cache)(nil)

// NewCache puts a cache of at most max bytes in dir in front of remote, taking in what dir
// already holds.
func NewCache(remote Store, dir string, max int64) (*Cache, error) {
	d, err := OpenDir(dir)
	if err != nil {
		return nil, err
	}
	if err := os.RemoveAll(filepath.Join(dir, ".incoming")); err != nil { // copies a crash cut short
		return nil, fmt.Errorf("blob: cache: %w", err)
	}
	c := &Cache{remote: remote, dir: d, max: max, items: map[string]*cached{}}
	have, err := d.List(context.Background(), "")
	if err != nil {
		return nil, err
	}
	for _, in := range have {
		c.items[in.Key] = &cached{size: in.Size, last: in.ModTime}
		c.used += in.Size
	}
	c.mu.Lock()
	c.evictLocked("")
	c.mu.Unlock()
	return c, nil
}

// Used is how many bytes the cache holds now.
func (c *Cache) Used() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.used
}

// Cached reports whether the cache holds the key's blob (placement prefers a node that does).
func (c *Cache) Cached(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.items[key] != nil
}

// Put uploads r to the remote while copying it into the cache; the copy is kept only when the
// upload succeeded.
func (c *Cache) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		// The local copy reads what the upload reads; its own failure does not fail the Put.
		err := c.dir.Put(ctx, tmpKey(key), pr, -1)
		pr.CloseWithError(err)
		done <- err
	}()
	err := c.remote.Put(ctx, key, io.TeeReader(r, &bestEffort{w: pw}), size)
	if err != nil {
		pw.CloseWithError(err)
	} else {
		pw.Close()
	}
	local := <-done
	if err != nil {
		_ = c.dir.Delete(ctx, tmpKey(key))
		return err
	}
	if local != nil {
		_ = c.dir.Delete(ctx, tmpKey(key))
		c.forget(key) // an older copy must not be served for the blob just put
		return nil
	}
	in, err := c.remote.Stat(ctx, key)
	if err != nil {
		_ = c.dir.Delete(ctx, tmpKey(key))
		c.forget(key)
		return nil // stored; only the copy is not kept
	}
	c.adopt(key, tmpKey(key), in)
	return nil
}

// tmpKey is where a copy waits in the cache until its upload or download completed.
func tmpKey(key string) string { return ".incoming/" + strings.ReplaceAll(key, "/", "_") }

// adopt moves a completed copy of the remote's version in from tmp to key and accounts for it.
func (c *Cache) adopt(key, tmp string, in Info) {
	from, _ := c.dir.path(tmp)
	to, _ := c.dir.path(key)
	fi, err := os.Stat(from)
	if err != nil || os.MkdirAll(filepath.Dir(to), 0o700) != nil || os.Rename(from, to) != nil {
		_ = os.Remove(from)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.items[key]; old != nil {
		c.used -= old.size
	}
	c.items[key] = &cached{size: fi.Size(), last: time.Now(), remote: in}
	c.used += fi.Size()
	c.evictLocked(key)
}

// evictLocked removes the least recently used copies until the cache fits, never keep.
func (c *Cache) evictLocked(keep string) {
	if c.used <= c.max {
		return
	}
	keys := make([]string, 0, len(c.items))
	for k := range c.items {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return c.items[keys[i]].last.Before(c.items[keys[j]].last) })
	for _, k := range keys {
		if c.used <= c.max {
			return
		}
		if k == keep {
			continue
		}
		// A reader holding the file open keeps reading it after the unlink.
		_ = c.dir.Delete(context.Background(), k)
		c.used -= c.items[k].size
		delete(c.items, k)
	}
}

// touch marks the key used now; false when it is not cached.
func (c *Cache) touch(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	it := c.items[key]
	if it == nil {
		return false
	}
	it.last = time.Now()
	return true
}

// current says whether the cached copy of key is of the remote's version in: another node may
// have put the key since (a sandbox's checkpoint, moved on and paused again; a template built
// again under its name), and a copy of an older version must never be served.
func (c *Cache) current(key string, in Info) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	it := c.items[key]
	return it != nil && !it.remote.ModTime.IsZero() && it.remote.Same(in)
}

// Get serves the cached copy when it is of the remote's current version (one Stat of the
// remote), downloading the blob whole into the cache otherwise.
func (c *Cache) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := CheckKey(key); err != nil {
		return nil, err
	}
	in, err := c.remote.Stat(ctx, key)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			c.drop(ctx, key)
		}
		return nil, err
	}
	if c.touch(key) {
		if c.current(key, in) {
			if rc, err := c.dir.Get(ctx, key); err == nil {
				return rc, nil
			}
		}
		c.drop(ctx, key) // another version now, or removed behind the cache's back
	}
	rc, err := c.remote.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	err = c.dir.Put(ctx, tmpKey(key), rc, -1)
	rc.Close()
	if err != nil {
		_ = c.dir.Delete(ctx, tmpKey(key))
		return nil, fmt.Errorf("blob: cache %s: %w", key, err)
	}
	c.adopt(key, tmpKey(key), in)
	if rc, err := c.dir.Get(ctx, key); err == nil {
		return rc, nil
	}
	return c.remote.Get(ctx, key) // larger than the whole cache: evicted at once
}

// drop removes key's copy from the cache.
func (c *Cache) drop(ctx context.Context, key string) {
	c.forget(key)
	_ = c.dir.Delete(ctx, key)
}

func (c *Cache) forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if it := c.items[key]; it != nil {
		c.used -= it.size
		delete(c.items, key)
	}
}

// GetRange serves the range from the cached copy, or from the remote on a miss.
func (c *Cache) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	if err := CheckKey(key); err != nil {
		return nil, err
	}
	if c.touch(key) {
		if in, err := c.remote.Stat(ctx, key); err == nil && c.current(key, in) {
			if rc, err := c.dir.GetRange(ctx, key, off, n); err == nil {
				return rc, nil
			} else if !errors.Is(err, ErrNotFound) {
				return nil, err
			}
		}
		c.drop(ctx, key)
	}
	return c.remote.GetRange(ctx, key, off, n)
}

// Stat asks the remote: it alone says whether a blob exists.
func (c *Cache) Stat(ctx context.Context, key string) (Info, error) { return c.remote.Stat(ctx, key) }

// Delete removes the blob from the remote and the cache.
func (c *Cache) Delete(ctx context.Context, key string) error {
	if err := c.remote.Delete(ctx, key); err != nil {
		return err
	}
	c.forget(key)
	if err := c.dir.Delete(ctx, key); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// List asks the remote.
func (c *Cache) List(ctx context.Context, prefix string) ([]Info, error) {
	return c.remote.List(ctx, prefix)
}

// bestEffort writes to w until w fails, then swallows the rest: the cache's copy of an upload
// must never fail (or block) the upload itself.
type bestEffort struct {
	w      io.Writer
	failed bool
}

func (b *bestEffort) Write(p []byte) (int, error) {
	if !b.failed {
		if _, err := b.w.Write(p); err != nil {
			b.failed = true
		}
	}
	return len(p), nil
}
