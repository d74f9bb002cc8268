package template

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// A build, an import and a removal hold an exclusive flock on their working directory
// (.build-*, .trash-*) for as long as they work in it. Open sweeps only the leftovers whose
// lock it can take: several processes share one store (cove server, the cove template CLI,
// test servers started in parallel), and a sweep must never delete another one's build.

// LockDir takes dir's lock and returns its release.
func LockDir(dir string) (release func(), err error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}

// abandoned reports whether no process works in dir (its lock is free), taking the lock
// until release is called when so.
func abandoned(dir string) (release func(), ok bool) {
	release, err := LockDir(dir)
	if errors.Is(err, unix.EWOULDBLOCK) || err != nil {
		return nil, false
	}
	return release, true
}
