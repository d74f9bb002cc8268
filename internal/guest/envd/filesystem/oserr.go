package filesystem

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"

	"github.com/cove-dev/cove/internal/guest/envd/fault"
)

// OSError wraps err, returned by an OS call op on path, with the fault sentinel it means, so
// that fault maps it to a Connect code or HTTP status. The OS cause stays in the chain
// (errors.Is(err, fs.ErrNotExist) still holds) and in the message:
// "stat /x: not found (no such file or directory)".
func OSError(op, path string, err error) error {
	if err == nil {
		return nil
	}
	cause := err
	var pe *fs.PathError
	var le *os.LinkError
	var se *os.SyscallError
	switch {
	case errors.As(err, &pe):
		cause = pe.Err
	case errors.As(err, &le):
		cause = le.Err
	case errors.As(err, &se):
		cause = se.Err
	}
	sentinel := sentinelOf(cause)
	if sentinel == nil {
		return fmt.Errorf("%s %s: %w", op, path, cause)
	}
	return fmt.Errorf("%s %s: %w (%w)", op, path, sentinel, cause)
}

func sentinelOf(err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fault.ErrNotFound
	case errors.Is(err, fs.ErrExist), errors.Is(err, syscall.ENOTEMPTY):
		return fault.ErrExists
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EROFS):
		return fault.ErrPermission
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return fault.ErrNoSpace
	case errors.Is(err, syscall.EFBIG):
		return fault.ErrTooLarge
	case errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.EISDIR),
		errors.Is(err, syscall.ENAMETOOLONG), errors.Is(err, syscall.ELOOP),
		errors.Is(err, syscall.EINVAL):
		return fault.ErrInvalid
	case errors.Is(err, syscall.EXDEV), errors.Is(err, syscall.EBUSY):
		return fault.ErrFailedPrecond
	}
	return nil
}

var errNotDir = syscall.ENOTDIR
