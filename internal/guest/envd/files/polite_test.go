package files

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"testing"
)

func TestPoliteCopyCopiesEverythingAndReportsWriteErrors(t *testing.T) {
	src := make([]byte, 3*politeChunk+123)
	for i := range src {
		src[i] = byte(rand.IntN(256))
	}
	var dst bytes.Buffer
	n, err := politeCopy(&dst, bytes.NewReader(src))
	if err != nil || n != int64(len(src)) || !bytes.Equal(dst.Bytes(), src) {
		t.Fatalf("copied %d of %d bytes, err %v, equal %v", n, len(src), err, bytes.Equal(dst.Bytes(), src))
	}

	boom := errors.New("disk full")
	n, err = politeCopy(&failAfter{n: politeChunk, err: boom}, bytes.NewReader(src))
	if !errors.Is(err, boom) || n != politeChunk {
		t.Fatalf("after a failed write: n %d, err %v; want %d and %v", n, err, politeChunk, boom)
	}
	if len(heavySlots) != 0 {
		t.Fatalf("%d slots still held after the copies", len(heavySlots))
	}
}

// failAfter accepts n bytes, then fails every write with err.
type failAfter struct {
	n   int
	err error
}

func (f *failAfter) Write(p []byte) (int, error) {
	if len(p) <= f.n {
		f.n -= len(p)
		return len(p), nil
	}
	n := f.n
	f.n = 0
	return n, f.err
}

var _ io.Writer = (*failAfter)(nil)
