package telemetry

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"net/http"
	"sync"
	"time"
)

// Request id headers. Cove reads both, prefers the E2B one, and echoes HeaderRequestID.
const (
	HeaderRequestID    = "X-E2B-Request-Id"
	HeaderRequestIDAlt = "X-Request-Id"
)

// maxRequestIDLen bounds ids taken from clients so a header cannot flood every log line.
const maxRequestIDLen = 128

type requestIDKey struct{}

// WithRequestID returns a context carrying id, with a logger that logs it on every line.
func WithRequestID(ctx context.Context, id string) context.Context {
	ctx = context.WithValue(ctx, requestIDKey{}, id)
	return With(ctx, KeyRequestID, id)
}

// RequestID returns the context's request id, or "" when there is none.
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

// RequestIDFrom returns the request id a client sent in h, or "" when it sent none usable.
// Ids longer than 128 bytes or with characters outside printable ASCII are not usable.
func RequestIDFrom(h http.Header) string {
	for _, name := range []string{HeaderRequestID, HeaderRequestIDAlt} {
		if id := h.Get(name); validRequestID(id) {
			return id
		}
	}
	return ""
}

func validRequestID(id string) bool {
	if id == "" || len(id) > maxRequestIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] <= ' ' || id[i] > '~' {
			return false
		}
	}
	return true
}

// Crockford's base32 in lower case: no i, l, o, u, so ids read aloud and sort as strings.
const idAlphabet = "0123456789abcdefghjkmnpqrstvwxyz"

var idState struct {
	sync.Mutex
	lastMS uint64
	seq    uint64
}

// NewRequestID mints a unique id that sorts by creation time: 10 characters of milliseconds
// since the epoch then 10 of randomness, 20 in all. Ids minted in the same millisecond by
// one process still sort in minting order.
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

// RequestIDMiddleware takes the client's request id or mints one, echoes it in the
// response headers, and puts it and a logger carrying it in the request's context.
func RequestIDMiddleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := RequestIDFrom(r.Header)
		if id == "" {
			id = NewRequestID()
			r.Header.Set(HeaderRequestID, id)
		}
		w.Header().Set(HeaderRequestID, id)
		next.ServeHTTP(w, r.WithContext(WithRequestID(r.Context(), id)))
	})
}
