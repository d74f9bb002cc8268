package runtime

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// A volume with a size quota is a sandbox disk that outlives sandboxes: the same sparse ext4
// image, made from the same pristine image per size, loop-mounted on the host where
// sandboxes bind-mount it. A write past its size gets ENOSPC, inside a sandbox or through
// the volume content API alike.

// NewDisk writes img (new): an empty ext4 filesystem of size bytes, sparse, copied from the
// pristine image of that size kept in dir (made on first use).
func NewDisk(dir, img string, size int64) error {
	src, err := pristineImage(dir, size)
	if err != nil {
		return fmt.Errorf("disk image: %w", err)
	}
	if err := copySparse(src, img); err != nil {
		_ = os.Remove(img)
		return fmt.Errorf("disk image: %w", err)
	}
	return nil
}

// MountDisk loop-mounts the ext4 image img at the directory mnt, unless something is mounted
// there already (a mount survives the server that made it, as sandboxes do).
func MountDisk(img, mnt string) error {
	if mounted, err := IsMountPoint(mnt); err != nil || mounted {
		return err
	}
	// A loop device already backed by img (sandboxes still bind its filesystem, though its
	// mount here is gone) is mounted again: the same filesystem, never a second one on
	// the same image, which would corrupt it.
	if name := loopOf(img); name != "" {
		if err := mountFS(name, mnt); err != nil {
			return fmt.Errorf("mount %s on %s: %w", name, mnt, err)
		}
		return nil
	}
	dev, err := attachLoop(img)
	if err != nil {
		return err
	}
	defer dev.Close()
	if err := mountFS(dev.Name(), mnt); err != nil {
		return fmt.Errorf("mount %s on %s: %w", dev.Name(), mnt, err)
	}
	return nil
}

// DiskAttached says whether a loop device is still backed by img: a sandbox (or a mount)
// still uses the filesystem in it, so the file is not yet a consistent copy of it.
func DiskAttached(img string) bool { return loopOf(img) != "" }

// loopOf returns the loop device backed by the file img, or "".
func loopOf(img string) string {
	abs, err := filepath.Abs(img)
	if err != nil {
		return ""
	}
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err == nil && strings.TrimSpace(string(b)) == abs {
			return "/dev/" + filepath.Base(filepath.Dir(filepath.Dir(f)))
		}
	}
	return ""
}

// UnmountDisk detaches what MountDisk mounted at mnt; sandboxes that still bind it keep it
// until they go, then the loop device clears itself.
func UnmountDisk(mnt string) error {
	if mounted, err := IsMountPoint(mnt); err != nil || !mounted {
		return err
	}
	if err := unix.Unmount(mnt, unix.MNT_DETACH); err != nil {
		return fmt.Errorf("unmount %s: %w", mnt, err)
	}
	return nil
}

// IsMountPoint reports whether dir is the root of a mount (its device differs from its
// parent's).
func IsMountPoint(dir string) (bool, error) {
	var self, parent unix.Stat_t
	if err := unix.Lstat(dir, &self); err != nil {
		return false, fmt.Errorf("stat %s: %w", dir, err)
	}
	if err := unix.Lstat(dir+"/..", &parent); err != nil {
		return false, fmt.Errorf("stat %s/..: %w", dir, err)
	}
	return self.Dev != parent.Dev || self.Ino == parent.Ino, nil
}
