package runtime

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	goruntime "runtime"

	"golang.org/x/sys/unix"
)

// CreateNetns makes a network namespace with its loopback up, pinned at path (see Spec.Netns).
func CreateNetns(path string) error { return createNetns(path) }

// RemoveNetns unpins and deletes a namespace made by CreateNetns; a missing one is fine.
func RemoveNetns(path string) error { return removeNetns(path) }

// createNetns makes a network namespace with its loopback up and pins it by bind-mounting its
// nsfs file onto path (the way `ip netns add` does), so it outlives every process in it.
func createNetns(path string) (err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o444)
	if err != nil {
		return err
	}
	f.Close()
	defer func() {
		if err != nil {
			removeNetns(path)
		}
	}()

	// The work happens on a fresh, locked thread. If returning to the host namespace fails the
	// thread stays locked, so the Go runtime discards it when the goroutine ends.
	errc := make(chan error, 1)
	go func() {
		goruntime.LockOSThread()
		host, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			goruntime.UnlockOSThread()
			errc <- err
			return
		}
		defer host.Close()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			goruntime.UnlockOSThread()
			errc <- fmt.Errorf("unshare net: %w", err)
			return
		}
		err = unix.Mount("/proc/thread-self/ns/net", path, "", unix.MS_BIND, "")
		if err != nil {
			err = fmt.Errorf("bind netns: %w", err)
		} else {
			err = loopbackUp()
		}
		if serr := unix.Setns(int(host.Fd()), unix.CLONE_NEWNET); serr != nil {
			errc <- errors.Join(err, fmt.Errorf("return to host netns: %w", serr))
			return // thread stays locked and dies with this goroutine
		}
		goruntime.UnlockOSThread()
		errc <- err
	}()
	return <-errc
}

// loopbackUp sets IFF_UP on lo in the calling thread's network namespace.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("loopback up: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback up: %w", err)
	}
	return nil
}

// removeNetns unpins and deletes a namespace made by createNetns; a missing one is fine.
func removeNetns(path string) error {
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount netns %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove netns %s: %w", path, err)
	}
	return nil
}

// dialInNetns dials from inside the network namespace pinned at path. The socket is created on
// a locked thread that has entered the namespace; a socket keeps the namespace it was made in,
// so the connection works from any goroutine afterwards. Only IP literals and "localhost" are
// accepted: a name lookup would run on other threads, in the host's namespace.
// DialNetns opens a connection from inside the network namespace pinned at path (a file
// under NetnsDir), for tools that reach a sandbox without its Runc (benchmarks).
func DialNetns(ctx context.Context, path, network, address string) (net.Conn, error) {
	return dialInNetns(ctx, path, network, address)
}

func dialInNetns(ctx context.Context, path, network, address string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	if host == "localhost" {
		host = "127.0.0.1"
	}
	if net.ParseIP(host) == nil {
		return nil, fmt.Errorf("%w: dial %s: host must be an IP address", ErrInvalid, address)
	}
	address = net.JoinHostPort(host, port)

	ns, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, ErrNotFound
		}
		return nil, err
	}
	defer ns.Close()

	type result struct {
		c   net.Conn
		err error
	}
	done := make(chan result, 1)
	go func() {
		goruntime.LockOSThread()
		self, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			goruntime.UnlockOSThread()
			done <- result{nil, err}
			return
		}
		defer self.Close()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			goruntime.UnlockOSThread()
			done <- result{nil, fmt.Errorf("enter netns: %w", err)}
			return
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, network, address)
		if serr := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); serr != nil {
			if c != nil {
				c.Close()
			}
			done <- result{nil, fmt.Errorf("return to host netns: %w", serr)}
			return // thread stays locked and dies with this goroutine
		}
		goruntime.UnlockOSThread()
		done <- result{c, err}
	}()
	r := <-done
	return r.c, r.err
}
