package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"strings"
	"sync"
	"time"

	"modernc.org/sqlite"

	"github.com/cove-dev/cove/internal/observe/telemetry"
)

// A log chunk's word filter (table log_chunk_filters, migration 0012) lets a search skip the
// chunks that cannot hold its terms without decoding them. It is a Bloom filter (two bits a
// key) over keys of the chunk's messages, lowered as a search lowers them:
//
//   - every trigram (three consecutive bytes);
//   - every token (a maximal run of letters, digits, '_' and non-ASCII bytes), whole;
//   - every token's prefixes of 4, 6 and 8 bytes.
//
// A search term needs all of its trigrams, the whole of each token it holds between two
// non-token bytes, and the longest indexed prefix of a token it starts after a non-token byte
// and ends inside. So a term's keys are a subset of the keys of any line containing it: a
// filter never skips a chunk that holds a match. Trigrams prune words that are rare or absent;
// the token keys prune what trigrams cannot, such as one id among millions made of digits
// that every chunk holds ("id=123456").
//
// A filter is built in scratch space sized for every key its text could hold (at most
// scratchBitsPerByte bits a byte of text, up to filterScratchBits) and folded (its halves
// OR'd together, which keeps every key's bits, since a bit's position is its hash modulo the
// size) down to about filterBitsPerKey bits for each key it holds, so a chunk of a few lines
// stays small and a chunk of repetitive lines too.
const (
	filterScratchBits  = 1 << 20
	filterMinBits      = 1 << 10
	filterBitsPerKey   = 10                       // with two bits a key: at most 3.3% false positives a key
	scratchBitsPerByte = filterBitsPerKey * 5 / 2 // a byte of text starts at most 2.5 keys
)

const (
	keyTrigram uint64 = 1 << 56
	keyPrefix  uint64 = 2 << 56
	keyToken   uint64 = 3 << 56
)

// filterFunc is the SQL function a chunk query calls: cove_log_filter(filter, keys) is 1 when
// the filter (NULL for a chunk written before migration 0012) may hold every key of keys, a
// blob of little-endian uint64 key hashes.
const filterFunc = "cove_log_filter"

func init() {
	sqlite.MustRegisterFunction(filterFunc, &sqlite.FunctionImpl{NArgs: 2, Deterministic: true, VolatileArgs: true,
		Scalar: func(_ *sqlite.FunctionContext, args []driver.Value) (driver.Value, error) {
			filter, _ := args[0].([]byte)
			keys, _ := args[1].([]byte)
			if filterMayHold(filter, keys) {
				return int64(1), nil
			}
			return int64(0), nil
		}})
}

// mix spreads a key's bits over the low and high halves that bitsOf takes.
func mix(h uint64) uint64 {
	h ^= h >> 32
	h *= 0x9e3779b97f4a7c15
	return h ^ h>>29
}

// bitsOf returns a key's two bit positions in a filter of m bits (a power of two).
func bitsOf(h uint64, m uint64) (uint64, uint64) {
	return h & (m - 1), (h >> 32) & (m - 1)
}

// byteClass holds each byte lowered as asciiLower lowers it, with isToken set for the bytes
// of tokens: letters, digits, '_' and every non-ASCII byte.
var byteClass = func() (t [256]uint16) {
	for i := range t {
		c := byte(i)
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		t[i] = uint16(c)
		if 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_' || c >= 0x80 {
			t[i] |= isToken
		}
	}
	return t
}()

const isToken = 1 << 8

func isTokenByte(c byte) bool { return byteClass[c]&isToken != 0 }

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// addMessage adds the keys of a message (see the filter's comment) to b, in one pass.
func addMessage[S ~string | ~[]byte](b *filterBuilder, msg S) {
	var w uint64           // the last three bytes, lowered
	h := uint64(fnvOffset) // of the token so far
	n := 0                 // bytes of the token so far
	for i := 0; i < len(msg); i++ {
		cl := byteClass[msg[i]]
		c := uint64(cl & 0xff)
		if w = (w<<8 | c) & 0xffffff; i >= 2 {
			b.add(mix(w | keyTrigram))
		}
		if cl&isToken == 0 {
			if n > 0 {
				b.add(mix(h ^ keyToken))
				h, n = fnvOffset, 0
			}
			continue
		}
		h = (h ^ c) * fnvPrime
		if n++; n == 4 || n == 6 || n == 8 {
			b.add(mix(h ^ keyPrefix))
		}
	}
	if n > 0 {
		b.add(mix(h ^ keyToken))
	}
}

// termKeys appends the keys every line holding term (lowered) holds.
func termKeys(keys []uint64, term []byte) []uint64 {
	// Token keys first: rarer than trigrams, they end a filter's check sooner.
	for i := 1; i < len(term); i++ {
		if isTokenByte(term[i-1]) || !isTokenByte(term[i]) {
			continue
		}
		// A token starts here in any line that holds term.
		h := uint64(fnvOffset)
		j, prefix := i, uint64(0)
		for ; j < len(term) && isTokenByte(term[j]); j++ {
			h = (h ^ uint64(term[j])) * fnvPrime
			if n := j - i + 1; n == 4 || n == 6 || n == 8 {
				prefix = mix(h ^ keyPrefix)
			}
		}
		switch {
		case j < len(term): // ended inside term: the line's token is exactly this one
			keys = append(keys, mix(h^keyToken))
		case prefix != 0: // term ends inside the line's token
			keys = append(keys, prefix)
		}
		i = j
	}
	if len(term) >= 3 {
		w := uint64(term[0])<<8 | uint64(term[1])
		for _, c := range term[2:] {
			w = (w<<8 | uint64(c)) & 0xffffff
			keys = append(keys, mix(w|keyTrigram))
		}
	}
	return keys
}

// filterBuilder builds chunk filters; its scratch space is reused.
type filterBuilder struct {
	scratch []uint64 // len is the bits in use / 64
	out     []byte
}

func (b *filterBuilder) add(h uint64) {
	p, q := bitsOf(h, uint64(len(b.scratch))*64)
	b.scratch[p>>6] |= 1 << (p & 63)
	b.scratch[q>>6] |= 1 << (q & 63)
}

// reset starts a filter of at most textBytes bytes of messages.
func (b *filterBuilder) reset(textBytes int) {
	if b.scratch == nil {
		b.scratch = make([]uint64, filterScratchBits/64)
	}
	size := uint64(filterMinBits)
	for size < filterScratchBits && size < uint64(textBytes)*scratchBitsPerByte {
		size *= 2
	}
	b.scratch = b.scratch[:size/64]
	clear(b.scratch)
}

// filterRowsPerInsert bounds the rows of one INSERT of filters (two variables each, well
// under SQLite's limit of 32766).
const filterRowsPerInsert = 500

// insertFilters writes (chunk id, filter) pairs, a statement per filterRowsPerInsert rows
// rather than one per chunk: chunks of a few lines are common, and a statement costs more
// than the row.
func insertFilters(ctx context.Context, tx *sql.Tx, pairs []any) error {
	for len(pairs) > 0 {
		n := min(len(pairs), 2*filterRowsPerInsert)
		q := "INSERT INTO log_chunk_filters (chunk_id, filter) VALUES (?, ?)" + strings.Repeat(", (?, ?)", n/2-1)
		if _, err := tx.ExecContext(ctx, q, pairs[:n]...); err != nil {
			return fmt.Errorf("chunk filters: %w", err)
		}
		pairs = pairs[n:]
	}
	return nil
}

// filterBuilders keeps builders (up to 128 KiB of scratch each) between InsertLogs calls.
var filterBuilders = sync.Pool{New: func() any { return new(filterBuilder) }}

// filter folds what was added into a filter of about filterBitsPerKey bits a key. The
// result is valid until the next reset.
func (b *filterBuilder) filter() []byte {
	set := 0
	for _, w := range b.scratch {
		set += bits.OnesCount64(w)
	}
	// The keys held, estimated from the bits set (two a key).
	size := uint64(len(b.scratch)) * 64
	m := float64(size)
	keys := -m / 2 * math.Log(1-float64(min(uint64(set), size-1))/m)
	for size > filterMinBits && float64(size/2) >= keys*filterBitsPerKey {
		size /= 2
	}
	words := b.scratch[:size/64]
	for rest := b.scratch[size/64:]; len(rest) > 0; rest = rest[size/64:] {
		for i, w := range rest[:size/64] {
			words[i] |= w
		}
	}
	b.out = b.out[:0]
	for _, w := range words {
		b.out = binary.LittleEndian.AppendUint64(b.out, w)
	}
	return b.out
}

// filterMayHold reports whether filter may hold every key in keys (little-endian uint64s).
// A missing or malformed filter may hold anything.
func filterMayHold(filter, keys []byte) bool {
	m := uint64(len(filter)) * 8
	if m < 64 || m&(m-1) != 0 {
		return true
	}
	for ; len(keys) >= 8; keys = keys[8:] {
		p, q := bitsOf(binary.LittleEndian.Uint64(keys), m)
		if filter[p>>3]&(1<<(p&7)) == 0 || filter[q>>3]&(1<<(q&7)) == 0 {
			return false
		}
	}
	return true
}

// searchKeys encodes the keys of a search's lowered terms for filterFunc; nil when the terms
// have none.
func searchKeys(terms [][]byte) []byte {
	var keys []uint64
	for _, t := range terms {
		keys = termKeys(keys, t)
	}
	if len(keys) == 0 {
		return nil
	}
	out := make([]byte, 0, 8*len(keys))
	for _, k := range keys {
		out = binary.LittleEndian.AppendUint64(out, k)
	}
	return out
}

// chunkFilter builds the filter of an encoded chunk's messages.
func chunkFilter(b *filterBuilder, data []byte) ([]byte, error) {
	b.reset(len(data))
	d := chunkDecoder{b: data}
	var l chunkLine
	for d.next(&l) {
		addMessage(b, l.message)
	}
	if d.err != nil {
		return nil, d.err
	}
	return b.filter(), nil
}

// fillBatch is how many chunks fillLogFilters reads at a time; each batch's filters are
// written in one short transaction.
const fillBatch = 32

// fillLogFilters builds the filter of every chunk written without one (before migration 0012),
// oldest first, until none is left or ctx ends. It reads and builds outside any transaction
// and writes each batch in one short one, so writers wait for it at most a few milliseconds;
// a chunk pruned meanwhile gets no filter.
func (db *DB) fillLogFilters(ctx context.Context) error {
	var fb filterBuilder
	type built struct {
		id     int64
		filter []byte
	}
	// Every chunk written since migration 0012 has its filter, and a filter never outlives
	// its chunk: equal counts (each from a small index or table) mean there is nothing to do,
	// without walking the chunks' pages.
	var chunks, filters int64
	if err := db.read.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM log_chunks), (SELECT count(*) FROM log_chunk_filters)`).Scan(&chunks, &filters); err != nil {
		return err
	}
	if chunks == filters {
		return nil
	}
	last := int64(0)
	for {
		rows, err := db.read.QueryContext(ctx, `SELECT id, data FROM log_chunks c WHERE id > ?
			AND NOT EXISTS (SELECT 1 FROM log_chunk_filters f WHERE f.chunk_id = c.id) ORDER BY id LIMIT ?`, last, fillBatch)
		if err != nil {
			return err
		}
		var batch []built
		for rows.Next() {
			var id int64
			var data sql.RawBytes
			if err := rows.Scan(&id, &data); err != nil {
				rows.Close()
				return err
			}
			last = id
			f, err := chunkFilter(&fb, data)
			if err != nil {
				continue // a malformed chunk keeps no filter: every search reads it
			}
			batch = append(batch, built{id, append([]byte(nil), f...)})
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if len(batch) == 0 {
			return nil
		}
		err = db.writeTx(ctx, func(tx *sql.Tx) error {
			for _, b := range batch {
				if _, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO log_chunk_filters (chunk_id, filter)
					SELECT ?, ? WHERE EXISTS (SELECT 1 FROM log_chunks WHERE id = ?)`, b.id, b.filter, b.id); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
}

// startFillingLogFilters runs fillLogFilters in the background until it is done or the DB
// closes.
func (db *DB) startFillingLogFilters(ctx context.Context) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	db.stopFill = func() { cancel(); <-done }
	go func() {
		defer close(done)
		start := time.Now()
		if err := db.fillLogFilters(ctx); err != nil && ctx.Err() == nil {
			telemetry.Logger(ctx).Warn("log chunk filters not built", telemetry.KeyError, err.Error())
			return
		}
		if took := time.Since(start); took > time.Second {
			telemetry.Logger(ctx).Info("log chunk filters built", telemetry.KeyDurationMS, took.Milliseconds())
		}
	}()
}

// logFiltersPending is how many log chunks have no word filter yet.
func (db *DB) logFiltersPending(ctx context.Context) (int, error) {
	var n int
	err := db.read.QueryRowContext(ctx, `SELECT count(*) FROM log_chunks c
		WHERE NOT EXISTS (SELECT 1 FROM log_chunk_filters f WHERE f.chunk_id = c.id)`).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count log chunks without a filter: %w", err)
	}
	return n, nil
}
