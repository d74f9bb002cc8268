package server

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// ErrDataDirInUse is returned when another cove server holds a data dir's lock.
var ErrDataDirInUse = errors.New("data dir is in use by another cove server")

// LockFile is the name, inside a data dir, of the file a running server holds locked.
const LockFile = "server.lock"

// DataDirLock is an exclusive flock on a data dir, held for a server's lifetime. The kernel
// drops it when the process dies, so a crashed server never leaves a stale lock behind.
type DataDirLock struct{ f *os.File }

// LockDataDir takes dir's lock without waiting. When another server holds it, the error wraps
// ErrDataDirInUse and names that server's pid, so a second server refuses to start instead of
// treating the first one's sandboxes as orphans.
func LockDataDir(dir string) (*DataDirLock, error) {
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		b, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			holder := "another process"
			if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil {
				holder = "pid " + strconv.Itoa(pid)
			}
			return nil, fmt.Errorf("%w: %s holds %s; stop that server or start this one with another --data dir", ErrDataDirInUse, holder, path)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &DataDirLock{f: f}, nil
}

// Release drops the lock; the file stays, so it is never removed from under another taker.
func (l *DataDirLock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}
