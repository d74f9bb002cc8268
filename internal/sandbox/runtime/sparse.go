package runtime

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Checkpoints are sparse: CRIU writes every page a process touched, zeros included (a
// zeroed buffer, a Go or Python heap's free spans), into its pages-*.img files. Those pages
// become holes after the dump, so they take no disk, and a restore reads them back as the
// zeros they were at no cost. Holes over compression: a restore reads the images as they
// are, so resume time does not pay for a decompression, and `cp --sparse=always` (fork and
// snapshot exports) keeps the holes.

// sparseBlock is the unit a hole is punched in: a page, which is also the block size of the
// filesystems a data dir lives on (ext4, xfs, tmpfs).
const sparseBlock = 4096

// sparsify punches holes where the memory images under dir hold whole zero blocks. It
// returns the bytes it freed. A filesystem that cannot punch holes leaves the files as they
// are (not an error: they are only bigger).
func sparsify(dir string) (int64, error) {
	var freed int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasPrefix(d.Name(), "pages-") || !strings.HasSuffix(d.Name(), ".img") {
			return err
		}
		n, err := punchZeros(path)
		freed += n
		return err
	})
	if errors.Is(err, unix.EOPNOTSUPP) {
		return freed, nil
	}
	return freed, err
}

// punchZeros punches a hole over every run of whole zero blocks in file.
func punchZeros(file string) (int64, error) {
	f, err := os.OpenFile(file, os.O_RDWR, 0)
	if err != nil {
		return 0, fmt.Errorf("sparsify %s: %w", file, err)
	}
	defer f.Close()
	buf := make([]byte, 256*sparseBlock)
	var off, runStart, freed int64
	runStart = -1
	punch := func(end int64) error {
		if runStart < 0 {
			return nil
		}
		start := runStart
		runStart = -1
		if err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, start, end-start); err != nil {
			return fmt.Errorf("sparsify %s: punch a hole: %w", file, err)
		}
		freed += end - start
		return nil
	}
	for {
		n, err := io.ReadFull(f, buf)
		for b := 0; b+sparseBlock <= n; b += sparseBlock {
			if zero(buf[b : b+sparseBlock]) {
				if runStart < 0 {
					runStart = off + int64(b)
				}
			} else if err := punch(off + int64(b)); err != nil {
				return freed, err
			}
		}
		// A tail shorter than a block is kept as it is.
		if tail := n % sparseBlock; tail != 0 {
			if err := punch(off + int64(n-tail)); err != nil {
				return freed, err
			}
		}
		off += int64(n)
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			return freed, fmt.Errorf("sparsify %s: %w", file, err)
		}
	}
	if err := punch(off); err != nil {
		return freed, err
	}
	return freed, nil
}

var zeroBlock [sparseBlock]byte

// zero reports whether block (sparseBlock bytes) holds only zeros.
func zero(block []byte) bool { return bytes.Equal(block, zeroBlock[:]) }
