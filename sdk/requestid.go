package cove

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"sync"
	"time"
)

// HeaderRequestID carries a call's request id to Cove, which echoes it back, logs it on
// every line of the call and passes it on to envd.
const HeaderRequestID = "X-E2B-Request-Id"

// Crockford's base32 in lower case: no i, l, o, u, so ids read aloud and sort as strings.
const idAlphabet = "0123456789abcdefghjkmnpqrstvwxyz"

var idState struct {
	sync.Mutex
	lastMS uint64
	seq    uint64
}

// NewRequestID mints a unique id that sorts by creation time: 10 characters of milliseconds
// since the epoch then 10 of randomness, 20 in all, the same form the server mints. Ids
// minted in the same millisecond by one process still sort in minting order.
func NewRequestID() string {
	now := uint64(time.Now().UnixMilli())
	var b [8]byte
	_, _ = rand.Read(b[:])
	random := binary.BigEndian.Uint64(b[:]) >> 14 // 50 bits

	idState.Lock()
	if now <= idState.lastMS {
		now = idState.lastMS
		idState.seq++
		random = idState.seq
	} else {
		idState.lastMS = now
		idState.seq = random
	}
	idState.Unlock()

	var out [20]byte
	for i := 9; i >= 0; i-- {
		out[i] = idAlphabet[now&31]
		now >>= 5
	}
	for i := 19; i >= 10; i-- {
		out[i] = idAlphabet[random&31]
		random >>= 5
	}
	return string(out[:])
}

type requestIDKey struct{}

// WithRequestID returns a context whose calls send id instead of minting one. Use it to
// know a call's id before it returns (calls that return only an error), or to carry an id
// of your own across services. Every call made with the context sends the same id.
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDKey{}, id)
}

// requestIDFor returns the id the caller set with WithRequestID, or a new one.
func requestIDFor(ctx context.Context) string {
	if id, ok := ctx.Value(requestIDKey{}).(string); ok && id != "" {
		return id
	}
	return NewRequestID()
}
