package process

import (
	"crypto/sha256"
	"fmt"
	"hash"
	"hash/crc32"
)

// digest follows one stream's binary output for its summary line. A CRC-32C of every byte is
// computed on the stream's own goroutine: at tens of GB/s it costs the stream almost nothing.
// A sha256 (about 0.5 s per GiB of CPU on this class of machine) is computed on a goroutine of
// its own, fed copies through a bounded hand-off that never blocks the stream, and only up to
// a cap: past the cap, or when the hasher falls behind, the sha256 is given up and the summary
// says so, rather than the stream slowing down for it.
type digest struct {
	crc   hash.Hash32
	bytes int64 // binary bytes seen

	limit   int64         // bytes the sha256 may cover
	pending chan []byte   // copies waiting for the hasher
	free    chan []byte   // buffers the hasher is done with
	done    chan struct{} // closed when the hasher has written sum
	sum     []byte
	skipped string // why the sha256 was given up; "" while it is computed
}

// digestBuffers bounds the copies in flight to the hasher (each at most one read, readSize).
const digestBuffers = 8

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func newDigest(limit int64) *digest {
	d := unstartedDigest(limit)
	go d.hash()
	return d
}

// unstartedDigest is a digest whose hasher is not running yet.
func unstartedDigest(limit int64) *digest {
	d := &digest{crc: crc32.New(castagnoli), limit: limit,
		pending: make(chan []byte, digestBuffers), free: make(chan []byte, digestBuffers), done: make(chan struct{})}
	for range digestBuffers {
		d.free <- nil // allocated on first use, at the size of the reads
	}
	return d
}

func (d *digest) hash() {
	defer close(d.done)
	h := sha256.New()
	for b := range d.pending {
		h.Write(b)
		d.free <- b[:0]
	}
	d.sum = h.Sum(nil)
}

// write adds b, which the caller may reuse once write returns.
func (d *digest) write(b []byte) {
	d.crc.Write(b)
	d.bytes += int64(len(b))
	if d.skipped != "" || len(b) == 0 {
		return
	}
	if d.bytes > d.limit {
		d.stop(fmt.Sprintf("over the %s collected per command", humanBytes(d.limit)))
		return
	}
	select {
	case buf := <-d.free:
		d.pending <- append(buf, b...) // a free buffer means room in pending: never blocks
	default:
		d.stop("over budget")
	}
}

func (d *digest) stop(why string) {
	d.skipped = why
	close(d.pending)
}

// summary ends the digest and returns the stream's one summary line.
func (d *digest) summary() string {
	if d.skipped == "" {
		close(d.pending)
		<-d.done
		return fmt.Sprintf("binary output, %s, crc32c %08x, sha256 %x", humanBytes(d.bytes), d.crc.Sum32(), d.sum)
	}
	return fmt.Sprintf("binary output, %s, crc32c %08x, sha256 not computed: %s", humanBytes(d.bytes), d.crc.Sum32(), d.skipped)
}
