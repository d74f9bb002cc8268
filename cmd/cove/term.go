package main

import (
	"context"
	"errors"
	"io"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"

	cove "github.com/cove-dev/cove/sdk"
)

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// forwardsStdin reports whether stdin carries input to forward by default: a pipe or a
// file, not a terminal or /dev/null.
func forwardsStdin() bool {
	fi, err := os.Stdin.Stat()
	if err != nil {
		return false
	}
	return fi.Mode()&os.ModeNamedPipe != 0 || fi.Mode().IsRegular() || fi.Mode()&os.ModeSocket != 0
}

// makeRaw puts the terminal f in raw mode (as cfmakeraw does) and returns its restore.
func makeRaw(f *os.File) (restore func(), err error) {
	fd := int(f.Fd())
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil, err
	}
	raw := *old
	raw.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	raw.Oflag &^= unix.OPOST
	raw.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	raw.Cflag &^= unix.CSIZE | unix.PARENB
	raw.Cflag |= unix.CS8
	raw.Cc[unix.VMIN], raw.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &raw); err != nil {
		return nil, err
	}
	return func() { unix.IoctlSetTermios(fd, unix.TCSETS, old) }, nil
}

// termSize is f's window size; 80x24 when f is no terminal.
func termSize(f *os.File) cove.PTYSize {
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil || ws.Col == 0 || ws.Row == 0 {
		return cove.PTYSize{Cols: 80, Rows: 24}
	}
	return cove.PTYSize{Cols: uint32(ws.Col), Rows: uint32(ws.Row)}
}

// resizeOnWinch resizes the sandbox's terminal whenever the local one changes size, until
// ctx ends.
func resizeOnWinch(ctx context.Context, sb *cove.Sandbox, pid uint32, f *os.File) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGWINCH)
	go func() {
		defer signal.Stop(ch)
		for {
			select {
			case <-ctx.Done():
				return
			case <-ch:
				sb.PTY.Resize(ctx, pid, termSize(f))
			}
		}
	}()
}

// pumpInput sends everything r yields to send, chunk by chunk, and calls closeInput at EOF.
// It returns when r ends, send fails, or done is closed (the command ended).
func pumpInput(r io.Reader, send func([]byte) error, closeInput func() error, done <-chan struct{}) error {
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			select {
			case <-done:
				return nil
			default:
			}
			if serr := send(append([]byte(nil), buf[:n]...)); serr != nil {
				return serr
			}
		}
		if errors.Is(err, io.EOF) {
			if closeInput != nil {
				return closeInput()
			}
			return nil
		}
		if err != nil {
			return err
		}
	}
}
