package runtime

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

// A sandbox with a disk limit writes into an ext4 filesystem of exactly that size: a sparse
// image file in its directory, loop-mounted at <dir>/disk, holding the overlay's upper and
// work directories. A write past the size gets ENOSPC inside the sandbox, and the host's
// disk gives it no more than the image's size. Each size is formatted once (mke2fs, about
// 80 ms) into a pristine image in the data dir; a sandbox copies its few hundred KiB of
// data extents, holes stay holes, and mounts it through LOOP_CONFIGURE, with no
// losetup or mount process on the create path.

// diskDir is where a disk-limited sandbox's image is mounted, under its directory.
const diskDir = "disk"

// pristine guards the formatted images, one per size.
var pristine sync.Mutex

// pristineImage returns the path of a formatted, empty ext4 image of size bytes in dataDir,
// making it on first use.
func pristineImage(dataDir string, size int64) (string, error) {
	path := filepath.Join(dataDir, fmt.Sprintf(".disk-%d.img", size))
	pristine.Lock()
	defer pristine.Unlock()
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	tmp := path + ".tmp"
	_ = os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o600)
	if err != nil {
		return "", err
	}
	err = f.Truncate(size)
	f.Close()
	if err != nil {
		return "", err
	}
	// No journal (a sandbox's scratch dies with it), no reserved blocks (the sandbox gets
	// the whole size), lazy inode tables (formatting stays fast).
	out, err := exec.Command("mke2fs", "-q", "-F", "-t", "ext4", "-m", "0", "-O", "^has_journal",
		"-E", "lazy_itable_init=1,nodiscard", tmp).CombinedOutput()
	if err != nil {
		_ = os.Remove(tmp)
		return "", fmt.Errorf("mke2fs (Debian package e2fsprogs): %w: %s", err, out)
	}
	return path, os.Rename(tmp, path)
}

// copySparse copies src to dst (new), only src's data extents: holes stay holes.
func copySparse(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer out.Close()
	if err := out.Truncate(fi.Size()); err != nil {
		return err
	}
	fd := int(in.Fd())
	for off := int64(0); off < fi.Size(); {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole is left
		} else if err != nil {
			return err
		}
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		if err != nil {
			return err
		}
		if _, err := io.Copy(io.NewOffsetWriter(out, data), io.NewSectionReader(in, data, hole-data)); err != nil {
			return err
		}
		off = hole
	}
	return out.Close()
}

// mountDisk gives the sandbox in dir an ext4 disk of size bytes mounted at dir/disk, and
// returns that path.
func mountDisk(dataDir, dir string, size int64) (string, error) {
	src, err := pristineImage(dataDir, size)
	if err != nil {
		return "", fmt.Errorf("disk image: %w", err)
	}
	img := filepath.Join(dir, "disk.img")
	if err := copySparse(src, img); err != nil {
		return "", fmt.Errorf("disk image: %w", err)
	}
	mnt := filepath.Join(dir, diskDir)
	if err := os.Mkdir(mnt, 0o755); err != nil {
		return "", err
	}
	dev, err := attachLoop(img)
	if err != nil {
		return "", err
	}
	// The loop device clears itself when the mount, its last user, goes away.
	if err := mountFS(dev.Name(), mnt); err != nil {
		dev.Close()
		return "", fmt.Errorf("mount %s on %s: %w", dev.Name(), mnt, err)
	}
	dev.Close()
	return mnt, nil
}

// attachLoop attaches img to a free loop device that clears itself once unused, and returns
// the device open (close it once mounted).
func attachLoop(img string) (*os.File, error) {
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("loop devices: %w", err)
	}
	defer ctl.Close()
	backing, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer backing.Close()
	for range 16 { // another process may take the free device first
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return nil, fmt.Errorf("find a free loop device: %w", err)
		}
		dev, err := os.OpenFile(fmt.Sprintf("/dev/loop%d", n), os.O_RDWR, 0)
		if err != nil {
			return nil, fmt.Errorf("open loop device: %w", err)
		}
		cfg := unix.LoopConfig{Fd: uint32(backing.Fd()), Info: unix.LoopInfo64{Flags: unix.LO_FLAGS_AUTOCLEAR}}
		err = unix.IoctlLoopConfigure(int(dev.Fd()), &cfg)
		if err == nil {
			return dev, nil
		}
		dev.Close()
		if !errors.Is(err, unix.EBUSY) {
			return nil, fmt.Errorf("configure loop device: %w", err)
		}
	}
	return nil, errors.New("configure loop device: every free device was taken meanwhile")
}

// mountFS mounts a sandbox disk. noinit_itable: the kernel would otherwise zero the lazy
// inode tables in the background after every mount, writing to the host's disk for nothing
// (the image's unused tables are holes, read as zeros).
func mountFS(dev, mnt string) error {
	return unix.Mount(dev, mnt, "ext4", unix.MS_NODEV|unix.MS_NOSUID, "noinit_itable")
}
