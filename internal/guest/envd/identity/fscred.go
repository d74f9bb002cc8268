package identity

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"

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

// haveFSIDs says whether the kernel has setfsuid(2) and setfsgid(2). gVisor's sentry answers
// ENOSYS to both (gvisor.dev/issue/260): there Act switches the thread's effective ids instead
// (setresuid and setresgid on the thread alone, the real and saved ids staying root's). File
// system calls are checked against the effective ids as against fsuid and fsgid, which follow
// them, and an effective uid other than 0 drops the file system capabilities just the same.
var haveFSIDs = sync.OnceValue(func() bool {
	_, err := unix.SetfsgidRetGid(-1)
	return !errors.Is(err, unix.ENOSYS)
})

// becomeOnThread gives the calling (locked) thread u's file system credentials, and returns
// the function that gives it back envd's.
func (u *User) becomeOnThread() (restore func() error, err error) {
	groups, err := unix.Getgroups()
	if err != nil {
		return func() error { return nil }, fmt.Errorf("%w: getgroups: %v", ErrCredentials, err)
	}
	uid, gid := os.Geteuid(), os.Getegid()
	fsIDs := haveFSIDs()
	restore = func() error {
		if fsIDs {
			_, _ = unix.SetfsuidRetUid(uid) // checked below
			_, _ = unix.SetfsgidRetGid(gid)
		} else {
			_ = setThreadEUID(uid) // uid first: the gid can change only as root; checked below
			_ = setThreadEGID(gid)
		}
		if err := unix.Setgroups(groups); err != nil {
			return err
		}
		if got := threadFSUID(fsIDs); got != uid {
			return fmt.Errorf("fsuid stayed %d", got)
		}
		if got := threadFSGID(fsIDs); got != gid {
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
	if fsIDs {
		_, _ = unix.SetfsgidRetGid(u.GID)
		_, _ = unix.SetfsuidRetUid(u.UID)
	} else if err := setThreadEGID(u.GID); err != nil { // gid first, while still root
		return restore, fmt.Errorf("%w: setresgid %d for %s: %v", ErrCredentials, u.GID, u.Name, err)
	} else if err := setThreadEUID(u.UID); err != nil {
		return restore, fmt.Errorf("%w: setresuid %d for %s: %v", ErrCredentials, u.UID, u.Name, err)
	}
	// setfsuid and setfsgid report failure only by leaving the id as it was.
	if got := threadFSGID(fsIDs); got != u.GID {
		return restore, fmt.Errorf("%w: setfsgid %d for %s: still %d", ErrCredentials, u.GID, u.Name, got)
	}
	if got := threadFSUID(fsIDs); got != u.UID {
		return restore, fmt.Errorf("%w: setfsuid %d for %s: still %d", ErrCredentials, u.UID, u.Name, got)
	}
	return restore, nil
}

// setThreadEUID and setThreadEGID set the calling thread's effective id only: the raw
// system call, not x/sys's or syscall's, which change every thread of the process.
func setThreadEUID(id int) error {
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, ^uintptr(0), uintptr(id), ^uintptr(0)); e != 0 {
		return e
	}
	return nil
}

func setThreadEGID(id int) error {
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, ^uintptr(0), uintptr(id), ^uintptr(0)); e != 0 {
		return e
	}
	return nil
}

// threadFSUID and threadFSGID are the calling thread's file system ids: asked of
// setfs*(-1), or its effective ids where the kernel has no setfs* (they are the same then).
func threadFSUID(fsIDs bool) int {
	if !fsIDs {
		r, _, _ := unix.RawSyscall(unix.SYS_GETEUID, 0, 0, 0)
		return int(r)
	}
	got, _ := unix.SetfsuidRetUid(-1)
	return got
}

func threadFSGID(fsIDs bool) int {
	if !fsIDs {
		r, _, _ := unix.RawSyscall(unix.SYS_GETEGID, 0, 0, 0)
		return int(r)
	}
	got, _ := unix.SetfsgidRetGid(-1)
	return got
}
