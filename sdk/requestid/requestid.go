// Package requestid mints and checks Cove's request ids, the one id that joins a client's log
// with every server and envd line of the same call. The server and the Go SDK both use it,
// so an id minted on either side has the same form.
//
// It imports nothing of Cove's, so the server, envd and the public SDK share it.
package requestid

import (
	"crypto/rand"
	"encoding/binary"
	"strings"
	"sync"
	"time"
)

// Header carries a call's request id; Cove echoes it. HeaderAlt is also read.
const (
	Header    = "X-E2B-Request-Id"
	HeaderAlt = "X-Request-Id"
)

// MaxLen bounds ids taken from clients, so a header cannot flood every log line.
const MaxLen = 128

// Crockford's base32 in lower case: no i, l, o, u, so ids read aloud and sort as strings.
const alphabet = "0123456789abcdefghjkmnpqrstvwxyz"

var state struct {
	sync.Mutex
	lastMS uint64
	seq    uint64
}

// New mints a unique id that sorts by creation time: 10 characters of milliseconds since
// the epoch then 10 of randomness, 20 in all. Ids minted in the same millisecond by one
// process still sort in minting order.
func New() string {
	now := uint64(time.Now().UnixMilli())
	var b [8]byte
	_, _ = rand.Read(b[:])
	random := binary.BigEndian.Uint64(b[:]) >> 14 // 50 bits

	state.Lock()
	if now <= state.lastMS {
		now = state.lastMS
		state.seq++
		random = state.seq
	} else {
		state.lastMS = now
		state.seq = random
	}
	state.Unlock()

	var out [20]byte
	for i := 9; i >= 0; i-- {
		out[i] = alphabet[now&31]
		now >>= 5
	}
	for i := 19; i >= 10; i-- {
		out[i] = alphabet[random&31]
		random >>= 5
	}
	return string(out[:])
}

// Valid reports whether id is usable as a request id: 1 to MaxLen printable ASCII bytes
// without spaces.
func Valid(id string) bool {
	if id == "" || len(id) > MaxLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] <= ' ' || id[i] > '~' {
			return false
		}
	}
	return true
}

// System is the request id of what Cove does by itself, no client's call causing it: the
// TTL evictor, a shutdown, a restart's clean-up.
const System = "system"

// Annotate ends msg with " (request id X)", the one format every error a user sees names
// its call in, so the id can be grepped from any message; msg is kept as it is when it
// names the id already or there is none.
func Annotate(msg, id string) string {
	if id == "" || strings.Contains(msg, id) {
		return msg
	}
	return msg + " (request id " + id + ")"
}
