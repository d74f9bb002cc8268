package runtime

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// This file: files bound into sandboxes kept on a tmpfs. A bind mount shows, in the
// sandbox's /proc/self/mountinfo, its source's path within the source's filesystem: a file
// under the host's /usr/local/bin or the data dir named the host's layout; the same file on
// /dev/shm shows only its path on that tmpfs (/cove-envd/<hash>/cove).

// ShmDir is the tmpfs the files bound into sandboxes live on.
const ShmDir = "/dev/shm"

// keepStaged is how many staged binaries StageBinary keeps besides the one it stages: the
// ones sandboxes of an earlier build may still restore with.
const keepStaged = 3

// OnTmpfs returns dir when it is on a tmpfs, else "" (the caller keeps its files where they
// are).
func OnTmpfs(dir string) string {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil || st.Type != unix.TMPFS_MAGIC {
		return ""
	}
	return dir
}

// StageBinary copies the executable at src to <ShmDir>/cove-envd/<its hash>/cove (once per
// content: servers of the same build share it) and returns that path, for sandboxes to bind.
// Without a tmpfs at ShmDir it returns src. Of the other builds staged there, the newest
// keepStaged stay (sandboxes of an upgraded server restore with theirs), older ones go unless
// a live server runs them.
func StageBinary(src string) (string, error) {
	if OnTmpfs(ShmDir) == "" {
		return src, nil
	}
	dst, err := stageBinary(filepath.Join(ShmDir, "cove-envd"), src)
	if err != nil {
		return "", err
	}
	holdStaged(filepath.Dir(dst))
	return dst, nil
}

// inUseFile is the file in a staged build's directory each server running that build holds
// a shared lock on, for its life: another server's prune leaves a build a live server runs
// (its sandboxes restore with it, on this node or, after a move, on another of the host).
const inUseFile = ".in-use"

var (
	heldMu sync.Mutex
	held   []*os.File // the locks this process holds, open for its life
)

// holdStaged takes this process's shared lock on dir's build. A failure only leaves the
// build to the prune's age rule.
func holdStaged(dir string) {
	f, err := os.OpenFile(filepath.Join(dir, inUseFile), os.O_CREATE|os.O_RDONLY, 0o600)
	if err != nil {
		return
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH); err != nil {
		f.Close()
		return
	}
	heldMu.Lock()
	held = append(held, f)
	heldMu.Unlock()
}

// inUse says whether a live server holds dir's build.
func inUse(dir string) bool {
	f, err := os.Open(filepath.Join(dir, inUseFile))
	if err != nil {
		return false
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return true
	}
	_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
	return false
}

// stageBinary is StageBinary into root.
func stageBinary(root, src string) (string, error) {
	f, err := os.Open(src)
	if err != nil {
		return "", fmt.Errorf("stage %s: %w", src, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("stage %s: %w", src, err)
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("stage %s: %w", src, err)
	}
	sum := hex.EncodeToString(h.Sum(nil))[:16]
	dir := filepath.Join(root, sum)
	dst := filepath.Join(dir, "cove")
	if st, err := os.Stat(dst); err == nil && st.Size() == fi.Size() {
		_ = os.Chtimes(dir, fi.ModTime(), time.Now()) // the newest in use
		return dst, nil
	}
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return "", fmt.Errorf("stage %s: %w", src, err)
	}
	if err := os.Chmod(root, 0o711); err != nil {
		return "", fmt.Errorf("stage %s: %w", src, err)
	}
	tmp, err := os.CreateTemp(dir, ".cove-*")
	if err != nil {
		return "", fmt.Errorf("stage %s: %w", src, err)
	}
	defer os.Remove(tmp.Name())
	_, err = f.Seek(0, io.SeekStart)
	if err == nil {
		_, err = io.Copy(tmp, f)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o555)
	}
	if err == nil {
		err = os.Chtimes(tmp.Name(), fi.ModTime(), fi.ModTime()) // what CRIU's file checks see stays the build's
	}
	if err == nil {
		err = os.Rename(tmp.Name(), dst)
	}
	if err != nil {
		return "", fmt.Errorf("stage %s: %w", src, err)
	}
	pruneStaged(root, sum)
	return dst, nil
}

// pruneStaged removes the staged builds in root but current and the newest keepStaged.
func pruneStaged(root, current string) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return
	}
	type staged struct {
		name string
		at   int64
	}
	var old []staged
	for _, e := range entries {
		if e.Name() == current || !e.IsDir() {
			continue
		}
		if fi, err := e.Info(); err == nil {
			old = append(old, staged{e.Name(), fi.ModTime().UnixNano()})
		}
	}
	slices.SortFunc(old, func(a, b staged) int { return int(b.at - a.at) })
	for _, s := range old[min(len(old), keepStaged):] {
		if inUse(filepath.Join(root, s.name)) {
			continue // a live server runs it
		}
		_ = os.RemoveAll(filepath.Join(root, s.name))
	}
}
