package envdapi

import (
	"strconv"
	"time"
	"unicode/utf8"
)

// AppendOutputLine encodes an output record as OutputLine's JSON would, without reflection:
// it runs for every line a command writes.
func AppendOutputLine(b []byte, ts time.Time, pid int, stream, requestID, tag string, line []byte, partial bool) []byte {
	b = append(b, `{"kind":"output","ts":"`...)
	b = ts.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","pid":`...)
	b = strconv.AppendInt(b, int64(pid), 10)
	b = append(b, `,"stream":`...)
	b = AppendJSONString(b, stream)
	if requestID != "" {
		b = append(b, `,"request_id":`...)
		b = AppendJSONString(b, requestID)
	}
	if tag != "" {
		b = append(b, `,"tag":`...)
		b = AppendJSONString(b, tag)
	}
	b = append(b, `,"line":`...)
	b = AppendJSONString(b, string(line))
	if partial {
		b = append(b, `,"partial":true`...)
	}
	return append(b, "}\n"...)
}

// AppendJSONString appends s as a JSON string: quotes, backslashes and control characters
// escaped, invalid UTF-8 replaced by U+FFFD, as encoding/json does.
func AppendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
