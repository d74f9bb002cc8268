package sqlite

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"unicode/utf8"

	"github.com/cove-dev/cove/internal/store"
)

// Log lines are stored in chunks (table log_chunks, migration 0006): one row per (sandbox,
// team, template) per InsertLogs call, split at maxChunkLines lines or maxChunkBytes bytes.
// A row holds the chunk's time and seq ranges, bitmasks of the levels, sources and streams in
// it, and the lines encoded in a blob; log_chunk_requests lists the request ids of each chunk.
// A query picks candidate chunks by sandbox, team, time, request id and bitmasks, decodes them
// and filters the lines in Go.
//
// The blob is the lines in seq order, each:
//
//	varint     ts - min_ts (zigzag)
//	uvarint    seq - min_seq
//	byte       level (0 debug .. 3 error)
//	str        source, stream
//	varint     pid
//	str        request id, message
//	uvarint    number of fields, then each: str key, byte kind, str value
//
// where str is a uvarint length and the bytes; a field of kind fieldText holds a JSON string's
// text, one of kind fieldJSON the compact JSON of any other value. Compressing the blob with
// compress/flate (BestSpeed) did not pay: on 500 typical lines it shrank 62 KB to 19 KB but
// cost 1.2 ms to compress (encoding takes 0.05 ms) and 0.4 ms to inflate, against 0.075 ms to
// decode and search them raw, so a search of a 100k-line sandbox would take about 6x longer.
//
// Lines written before migration 0006, in the old logs table, were moved into chunks by
// migration 0025 (migrate_oldlogs.go), which dropped the table.
const (
	maxChunkLines = 2000
	maxChunkBytes = 1 << 20

	fieldText byte = 0
	fieldJSON byte = 1
)

func sourceBit(s string) int64 {
	switch s {
	case store.SourceEnvd:
		return 1
	case store.SourceProcess:
		return 2
	case store.SourceServer:
		return 4
	}
	return 8
}

func streamBit(s string) int64 {
	switch s {
	case "":
		return 1
	case "stdout":
		return 2
	case "stderr":
		return 4
	case "pty":
		return 8
	}
	return 16
}

func appendStr(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// chunkBuilder encodes one chunk's lines.
type chunkBuilder struct {
	data                     []byte
	minTs, maxTs             int64
	minSeq, maxSeq           int64
	n                        int
	levels, sources, streams int64
	requests                 []string
	filter                   *filterBuilder // of the messages
}

// encodeChunk encodes lines (with their seqs) into a chunk, and their word filter into
// c.filter, which the caller provides.
func encodeChunk(c *chunkBuilder, lines []*store.LogLine, seqs []int64) error {
	*c = chunkBuilder{data: c.data[:0], requests: c.requests[:0], n: len(lines), filter: c.filter}
	c.minTs, c.maxTs = toMicros(lines[0].Time), toMicros(lines[0].Time)
	c.minSeq, c.maxSeq = seqs[0], seqs[len(seqs)-1]
	text := 0
	for _, l := range lines {
		ts := toMicros(l.Time)
		c.minTs, c.maxTs = min(c.minTs, ts), max(c.maxTs, ts)
		text += len(l.Message)
	}
	c.filter.reset(text)
	for i, l := range lines {
		level, ok := store.LogLevelRank(l.Level)
		if !ok {
			level = 1
		}
		c.levels |= 1 << level
		c.sources |= sourceBit(l.Source)
		c.streams |= streamBit(l.Stream)
		if l.RequestID != "" && !slices.Contains(c.requests, l.RequestID) {
			c.requests = append(c.requests, l.RequestID)
		}
		b := binary.AppendVarint(c.data, toMicros(l.Time)-c.minTs)
		b = binary.AppendUvarint(b, uint64(seqs[i]-c.minSeq))
		b = append(b, byte(level))
		b = appendStr(b, l.Source)
		b = appendStr(b, l.Stream)
		b = binary.AppendVarint(b, int64(l.PID))
		b = appendStr(b, l.RequestID)
		b = appendStr(b, l.Message)
		addMessage(c.filter, l.Message)
		b = binary.AppendUvarint(b, uint64(len(l.Fields)))
		for k, v := range l.Fields {
			b = appendStr(b, k)
			if s, ok := v.(string); ok && utf8.ValidString(s) {
				b = append(b, fieldText)
				b = appendStr(b, s)
				continue
			}
			j, err := json.Marshal(v)
			if err != nil {
				return fmt.Errorf("fields: %w", err)
			}
			if len(j) > 0 && j[0] == '"' {
				var s string
				if err := json.Unmarshal(j, &s); err != nil {
					return fmt.Errorf("fields: %w", err)
				}
				b = append(b, fieldText)
				b = appendStr(b, s)
				continue
			}
			b = append(b, fieldJSON)
			b = appendStr(b, string(j))
		}
		c.data = b
	}
	return nil
}

// chunkLine is one decoded line of a chunk; its byte slices point into the chunk's blob.
type chunkLine struct {
	ts, seq int64
	level   byte
	source  []byte
	stream  []byte
	pid     int64
	request []byte
	message []byte
	nfields uint64
	fields  []byte // the encoded fields
}

var errBadChunk = errors.New("malformed log chunk")

// chunkDecoder reads a chunk's lines one by one.
type chunkDecoder struct {
	b             []byte
	minTs, minSeq int64
	err           error
}

func (d *chunkDecoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err, d.b = errBadChunk, nil
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *chunkDecoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err, d.b = errBadChunk, nil
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *chunkDecoder) byte1() byte {
	if len(d.b) == 0 {
		d.err = errBadChunk
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *chunkDecoder) str() []byte {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.err, d.b = errBadChunk, nil
		return nil
	}
	s := d.b[:n:n]
	d.b = d.b[n:]
	return s
}

// next decodes the next line into l; false at the end or on an error (d.err).
func (d *chunkDecoder) next(l *chunkLine) bool {
	if len(d.b) == 0 || d.err != nil {
		return false
	}
	l.ts = d.minTs + d.varint()
	l.seq = d.minSeq + int64(d.uvarint())
	l.level = d.byte1()
	l.source = d.str()
	l.stream = d.str()
	l.pid = d.varint()
	l.request = d.str()
	l.message = d.str()
	l.nfields = d.uvarint()
	start := d.b
	for range l.nfields {
		d.str()
		d.byte1()
		d.str()
		if d.err != nil {
			break
		}
	}
	if d.err != nil {
		return false
	}
	l.fields = start[:len(start)-len(d.b)]
	return true
}

// field returns the text of field key of l, as the Fields filter compares it.
func (l *chunkLine) field(key string) ([]byte, bool) {
	d := chunkDecoder{b: l.fields}
	for range l.nfields {
		k := d.str()
		d.byte1()
		v := d.str()
		if d.err != nil {
			return nil, false
		}
		if string(k) == key {
			return v, true
		}
	}
	return nil, false
}

// logLine materializes l as a line of the chunk's sandbox.
func (l *chunkLine) logLine(sandbox, team, template string) (store.LogLine, error) {
	out := store.LogLine{Time: fromMicros(l.ts), SandboxID: sandbox, TeamID: team, TemplateID: template,
		Level: store.LogLevels[min(int(l.level), len(store.LogLevels)-1)], Source: string(l.source),
		Stream: string(l.stream), PID: int(l.pid), RequestID: string(l.request), Message: string(l.message)}
	if l.nfields > 0 {
		out.Fields = make(map[string]any, l.nfields)
		d := chunkDecoder{b: l.fields}
		for range l.nfields {
			k, kind, v := d.str(), d.byte1(), d.str()
			if d.err != nil {
				return out, d.err
			}
			if kind == fieldText {
				out.Fields[string(k)] = string(v)
				continue
			}
			var a any
			if err := json.Unmarshal(v, &a); err != nil {
				return out, fmt.Errorf("fields: %w", err)
			}
			out.Fields[string(k)] = a
		}
	}
	return out, nil
}
