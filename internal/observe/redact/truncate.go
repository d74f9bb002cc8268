package redact

import (
	"strconv"
	"unicode/utf8"
)

// Truncate keeps at most head bytes from the start of b and tail bytes from its end, joined by
// "…[N bytes omitted]…", and returns N. Both cuts fall on UTF-8 boundaries (the kept parts may
// be up to 3 bytes shorter than asked), so valid input gives valid output. When b fits in
// head+tail it is returned as is, with 0. Redact before truncating: a secret cut in half is no
// longer found.
func Truncate(b []byte, head, tail int) (out []byte, omitted int) {
	head, tail = max(head, 0), max(tail, 0)
	if len(b) <= head+tail {
		return b, 0
	}
	h := head
	for n := 0; n < 3 && h > 0 && !utf8.RuneStart(b[h]); n++ {
		h--
	}
	t := len(b) - tail
	for n := 0; n < 3 && t < len(b) && !utf8.RuneStart(b[t]); n++ {
		t++
	}
	omitted = t - h
	out = make([]byte, 0, h+len(b)-t+32)
	out = append(out, b[:h]...)
	out = append(out, "…["...)
	out = strconv.AppendInt(out, int64(omitted), 10)
	out = append(out, " bytes omitted]…"...)
	out = append(out, b[t:]...)
	return out, omitted
}
