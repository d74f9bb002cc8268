package identity

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// ErrCredentials is returned by Act when the thread's file system credentials cannot be
// switched to the user's.
var ErrCredentials = errors.New("cannot switch to the user's file system credentials")

// Act runs fn with u's file system credentials, so that every file system call in fn is
// checked by the kernel as u's (and what fn creates is u's): the permission checks cannot
// differ from what the user would get, and there is no window between a check and the act.
// When envd is not root, or u is envd's own account, fn simply runs.
//
// fn runs on a goroutine of its own, locked to an OS thread whose fsuid, fsgid and
// supplementary groups are u's: Linux keeps credentials per thread, and setfsuid(2),
// setfsgid(2) and the raw setgroups(2) of x/sys/unix change only the calling thread's (the
// syscall package's Setgroups changes every thread's). Changing the fsuid away from 0 also
// drops the thread's file system capabilities (CAP_DAC_OVERRIDE, CAP_CHOWN, CAP_FOWNER...),
// and changing it back restores them. While the thread is locked the runtime starts no
// thread from it, so no other thread inherits u's credentials. The thread is handed back to
// the runtime only once it is root again; if that fails, it stays locked and exits with
// the goroutine. fn must do its file system work on its own goroutine, not start others
// for it.
func (u *User) Act(fn func() error) error {
	if u == nil || os.Geteuid() != 0 || u.IsSelf() {
		return fn()
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		restore, err := u.becomeOnThread()
		if err != nil {
			if restore() == nil {
				runtime.UnlockOSThread()
			}
			done <- err
			return
		}
		var ferr error
		func() {
			defer func() {
				if restore() == nil {
					runtime.UnlockOSThread()
				}
			}()
			ferr = fn()
		}()
		done <- ferr
	}()
	return <-done
}

// becomeOnThread gives the calling (locked) thread u's file system credentials, and returns
// the function that gives it back envd's.
func (u *User) becomeOnThread() (restore func() error, err error) {
	groups, err := unix.Getgroups()
	if err != nil {
		return func() error { return nil }, fmt.Errorf("%w: getgroups: %v", ErrCredentials, err)
	}
	uid, gid := os.Geteuid(), os.Getegid()
	restore = func() error {
		_, _ = unix.SetfsuidRetUid(uid) // checked below
		_, _ = unix.SetfsgidRetGid(gid)
		if err := unix.Setgroups(groups); err != nil {
			return err
		}
		if got, _ := unix.SetfsuidRetUid(-1); got != uid {
			return fmt.Errorf("fsuid stayed %d", got)
		}
		if got, _ := unix.SetfsgidRetGid(-1); got != gid {
			return fmt.Errorf("fsgid stayed %d", got)
		}
		return nil
	}
	want := make([]int, 0, len(u.Groups)+1)
	want = append(want, u.GID)
	for _, g := range u.Groups {
		if int(g) != u.GID {
			want = append(want, int(g))
		}
	}
	if err := unix.Setgroups(want); err != nil {
		return restore, fmt.Errorf("%w: setgroups for %s: %v", ErrCredentials, u.Name, err)
	}
	_, _ = unix.SetfsgidRetGid(u.GID)
	_, _ = unix.SetfsuidRetUid(u.UID)
	// setfsuid and setfsgid report failure only by leaving the id as it was.
	if got, _ := unix.SetfsgidRetGid(-1); got != u.GID {
		return restore, fmt.Errorf("%w: setfsgid %d for %s: still %d", ErrCredentials, u.GID, u.Name, got)
	}
	if got, _ := unix.SetfsuidRetUid(-1); got != u.UID {
		return restore, fmt.Errorf("%w: setfsuid %d for %s: still %d", ErrCredentials, u.UID, u.Name, got)
	}
	return restore, nil
}
