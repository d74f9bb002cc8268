package runtime

import (
	"errors"
	"fmt"
	"os"
	"path"

	"golang.org/x/sys/unix"
)

// ErrBindTarget: a bind mount's target cannot take it in the sandbox's root, such as a
// directory bound over a file (/etc/passwd) or under one. The message names the target as
// the sandbox sees it, never a host path.
var ErrBindTarget = errors.New("bad bind mount target")

// checkBindTargets refuses, before runc is asked (it would fail naming host paths), a bind
// whose target in root is not of its source's kind, or lies under something not a
// directory. Targets resolve inside root, as runc resolves them (symlinks stay in it); a
// target that does not exist yet is made by runc under its nearest existing directory.
func checkBindTargets(root string, binds []Bind) error {
	if len(binds) == 0 {
		return nil
	}
	rootFd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the sandbox's root: %w", err)
	}
	defer unix.Close(rootFd)
	for _, b := range binds {
		src, err := os.Stat(b.Source)
		if err != nil {
			return fmt.Errorf("bind onto %s: its source is missing", b.Target)
		}
		if err := checkBindTarget(rootFd, b.Target, src.IsDir()); err != nil {
			return err
		}
	}
	return nil
}

func checkBindTarget(rootFd int, target string, dir bool) error {
	how := &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS}
	for p := path.Clean(target); ; p = path.Dir(p) {
		fd, err := unix.Openat2(rootFd, p, how)
		if errors.Is(err, unix.ENOENT) && p != "/" {
			continue
		}
		if errors.Is(err, unix.ENOSYS) {
			return nil // a kernel before openat2 (5.6): runc's own check stands
		}
		if errors.Is(err, unix.ENOTDIR) {
			return fmt.Errorf("%w: %s lies under a file of the sandbox's root, not a directory", ErrBindTarget, target)
		}
		if err != nil {
			return fmt.Errorf("bind onto %s: %w", target, err)
		}
		var st unix.Stat_t
		err = unix.Fstat(fd, &st)
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("bind onto %s: %w", target, err)
		}
		isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
		switch {
		case p != path.Clean(target) && !isDir:
			return fmt.Errorf("%w: %s lies under %s, a file of the sandbox's root, not a directory", ErrBindTarget, target, p)
		case p == path.Clean(target) && dir && !isDir:
			return fmt.Errorf("%w: %s is a file in the sandbox's root: a directory cannot be mounted over it", ErrBindTarget, target)
		case p == path.Clean(target) && !dir && isDir:
			return fmt.Errorf("%w: %s is a directory in the sandbox's root: a file cannot be mounted over it", ErrBindTarget, target)
		}
		return nil
	}
}
