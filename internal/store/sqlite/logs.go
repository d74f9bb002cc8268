package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/cove-dev/cove/internal/store"
)

var (
	_ store.LogStore     = (*DB)(nil)
	_ store.CommandStore = (*DB)(nil)
)

// Limits of log and command queries.
const (
	maxLogLimit         = 1000
	defaultLogLimit     = 1000
	maxCommandLimit     = 1000
	defaultCommandLimit = 100
	// pruneChunk bounds the lines one prune transaction deletes, so the writer is never
	// held for long.
	pruneChunk = 5000
)

// logSeq numbers stored lines. Starting from the clock's nanoseconds keeps the numbers
// rising across restarts, so lines of the same microsecond stay in insertion order.
var logSeq atomic.Int64

func init() { logSeq.Store(time.Now().UnixNano()) }

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
// Lines written before migration 0006 stay in the old logs table; queries read both and merge,
// until PruneLogs deletes the old ones.
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

// encodeChunk encodes lines (with their seqs) into a chunk.
func encodeChunk(c *chunkBuilder, lines []*store.LogLine, seqs []int64) error {
	if c.filter == nil {
		c.filter = &filterBuilder{}
	}
	*c = chunkBuilder{data: c.data[:0], requests: c.requests[:0], n: len(lines), filter: c.filter}
	c.filter.reset()
	c.minTs, c.maxTs = toMicros(lines[0].Time), toMicros(lines[0].Time)
	c.minSeq, c.maxSeq = seqs[0], seqs[len(seqs)-1]
	for _, l := range lines {
		ts := toMicros(l.Time)
		c.minTs, c.maxTs = min(c.minTs, ts), max(c.maxTs, ts)
	}
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

// InsertLogs stores lines in one transaction: one chunk per (sandbox, team, template) of
// the batch, or more past maxChunkLines or maxChunkBytes. A line with an unknown level is
// stored as info.
func (db *DB) InsertLogs(ctx context.Context, lines []store.LogLine) error {
	if len(lines) == 0 {
		return nil
	}
	for i := range lines {
		if lines[i].SandboxID == "" || lines[i].TeamID == "" {
			return fmt.Errorf("insert logs: line %d: sandbox and team are required", i)
		}
	}
	first := logSeq.Add(int64(len(lines))) - int64(len(lines)) + 1
	type groupKey struct{ sandbox, team, template string }
	type group struct {
		lines []*store.LogLine
		seqs  []int64
	}
	groups := map[groupKey]*group{}
	var order []*group
	for i := range lines {
		l := &lines[i]
		k := groupKey{l.SandboxID, l.TeamID, l.TemplateID}
		g := groups[k]
		if g == nil {
			g = &group{}
			groups[k] = g
			order = append(order, g)
		}
		g.lines = append(g.lines, l)
		g.seqs = append(g.seqs, first+int64(i))
	}
	err := db.writeTx(ctx, func(tx *sql.Tx) error {
		insChunk, err := tx.PrepareContext(ctx, `INSERT INTO log_chunks (sandbox_id, team_id, template_id,
			min_ts, max_ts, min_seq, max_seq, lines, levels, sources, streams, data)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
		if err != nil {
			return err
		}
		defer insChunk.Close()
		insFilter, err := tx.PrepareContext(ctx, `INSERT INTO log_chunk_filters (chunk_id, filter) VALUES (?, ?)`)
		if err != nil {
			return err
		}
		defer insFilter.Close()
		var insReq *sql.Stmt
		defer func() {
			if insReq != nil {
				insReq.Close()
			}
		}()
		var c chunkBuilder
		for _, g := range order {
			for start := 0; start < len(g.lines); {
				// Cut at maxChunkLines lines, or after the line that passes maxChunkBytes of
				// message and fields.
				end, size := start, 0
				for end < len(g.lines) && end-start < maxChunkLines && size < maxChunkBytes {
					l := g.lines[end]
					size += len(l.Message) + 64
					for k, v := range l.Fields {
						size += len(k) + 16
						if s, ok := v.(string); ok {
							size += len(s)
						}
					}
					end++
				}
				if err := encodeChunk(&c, g.lines[start:end], g.seqs[start:end]); err != nil {
					return fmt.Errorf("lines of %s: %w", g.lines[start].SandboxID, err)
				}
				l := g.lines[start]
				res, err := insChunk.ExecContext(ctx, l.SandboxID, l.TeamID, l.TemplateID, c.minTs, c.maxTs,
					c.minSeq, c.maxSeq, c.n, c.levels, c.sources, c.streams, c.data)
				if err != nil {
					return fmt.Errorf("lines of %s: %w", l.SandboxID, err)
				}
				id, err := res.LastInsertId()
				if err != nil {
					return err
				}
				if _, err := insFilter.ExecContext(ctx, id, c.filter.filter()); err != nil {
					return fmt.Errorf("filter of %s: %w", l.SandboxID, err)
				}
				if len(c.requests) > 0 {
					if insReq == nil {
						if insReq, err = tx.PrepareContext(ctx, `INSERT OR IGNORE INTO log_chunk_requests
							(request_id, team_id, chunk_id) VALUES (?, ?, ?)`); err != nil {
							return err
						}
					}
					for _, r := range c.requests {
						if _, err := insReq.ExecContext(ctx, r, l.TeamID, id); err != nil {
							return fmt.Errorf("request ids of %s: %w", l.SandboxID, err)
						}
					}
				}
				start = end
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("insert %d log lines: %w", len(lines), err)
	}
	return nil
}

// likeEscaper escapes LIKE's wildcards, with \ as the escape character.
var likeEscaper = strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)

// searchTerms splits a search into the substrings a line must all contain: its
// whitespace-separated words, and each "double-quoted" phrase whole.
func searchTerms(s string) []string {
	var terms []string
	for {
		s = strings.TrimSpace(s)
		if s == "" {
			return terms
		}
		if s[0] == '"' {
			if end := strings.IndexByte(s[1:], '"'); end >= 0 {
				if phrase := s[1 : 1+end]; phrase != "" {
					terms = append(terms, phrase)
				}
				s = s[2+end:]
				continue
			}
			s = s[1:] // an unmatched quote is not part of the search
			continue
		}
		word, rest, _ := strings.Cut(s, " ")
		if i := strings.IndexAny(word, "\t\n\r"); i >= 0 {
			word, rest = word[:i], word[i:]+" "+rest
		}
		terms = append(terms, word)
		s = rest
	}
}

// asciiLower appends s with ASCII letters lowered to dst, as LIKE compares them.
func asciiLower(dst, s []byte) []byte {
	for _, c := range s {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		dst = append(dst, c)
	}
	return dst
}

// posLine is a line with its seq, the second half of its position.
type posLine struct {
	line store.LogLine
	seq  int64
}

// logBefore reports whether position (ts1, seq1) comes before (ts2, seq2) in a listing's
// order.
func logBefore(backward bool, ts1, seq1, ts2, seq2 int64) bool {
	if backward {
		return ts1 > ts2 || ts1 == ts2 && seq1 > seq2
	}
	return ts1 < ts2 || ts1 == ts2 && seq1 < seq2
}

// lineCollector keeps the first `need` lines, in a listing's order, of those offered.
type lineCollector struct {
	backward bool
	need     int
	lines    []posLine
	sorted   bool
}

func (c *lineCollector) full() bool { return c.sorted && len(c.lines) >= c.need }

// worst is the position of the last line kept; only when full.
func (c *lineCollector) worst() (int64, int64) {
	l := &c.lines[c.need-1]
	return toMicros(l.line.Time), l.seq
}

// wants reports whether a line at (ts, seq) would be kept.
func (c *lineCollector) wants(ts, seq int64) bool {
	if !c.full() {
		return true
	}
	wts, wseq := c.worst()
	return logBefore(c.backward, ts, seq, wts, wseq)
}

func (c *lineCollector) add(l posLine) {
	c.lines = append(c.lines, l)
	c.sorted = false
}

// settle sorts the kept lines and drops those past need.
func (c *lineCollector) settle() {
	if c.sorted {
		return
	}
	slices.SortFunc(c.lines, func(a, b posLine) int {
		ta, tb := toMicros(a.line.Time), toMicros(b.line.Time)
		switch {
		case logBefore(c.backward, ta, a.seq, tb, b.seq):
			return -1
		case logBefore(c.backward, tb, b.seq, ta, a.seq):
			return 1
		}
		return 0
	})
	if len(c.lines) > c.need {
		c.lines = c.lines[:c.need]
	}
	c.sorted = true
}

// done reports whether no line of a chunk spanning [minTs, maxTs] can be kept, nor of any
// chunk after it in the scan's order (ascending min_ts forward, descending max_ts backward).
func (c *lineCollector) done(minTs, maxTs int64) bool {
	c.settle()
	if !c.full() {
		return false
	}
	wts, _ := c.worst()
	if c.backward {
		return maxTs < wts
	}
	return minTs > wts
}

// logFilter is a LogQuery's per-line checks.
type logFilter struct {
	q        *store.LogQuery
	lo, hi   int64 // ts bounds from the cursor, inclusive
	minLevel byte
	terms    [][]byte // lowered
	buf      []byte
}

func newLogFilter(q *store.LogQuery) (*logFilter, error) {
	f := &logFilter{q: q, lo: math.MinInt64, hi: math.MaxInt64}
	if !q.Cursor.IsZero() {
		ms := q.Cursor.UnixMilli()
		if q.Backward {
			f.hi = ms*1000 + 999
		} else {
			f.lo = ms * 1000
		}
	}
	if q.MinLevel != "" {
		rank, ok := store.LogLevelRank(q.MinLevel)
		if !ok {
			return nil, fmt.Errorf("query logs: unknown level %q", q.MinLevel)
		}
		f.minLevel = byte(rank)
	}
	for _, t := range searchTerms(q.Search) {
		f.terms = append(f.terms, asciiLower(nil, []byte(t)))
	}
	return f, nil
}

func (f *logFilter) match(l *chunkLine) bool {
	q := f.q
	if l.ts < f.lo || l.ts > f.hi {
		return false
	}
	if q.After != nil && !logBefore(q.Backward, toMicros(q.After.Time), q.After.Seq, l.ts, l.seq) {
		return false
	}
	if l.level < f.minLevel {
		return false
	}
	if q.PID != 0 && l.pid != int64(q.PID) {
		return false
	}
	if q.Source != "" && string(l.source) != q.Source {
		return false
	}
	if q.Stream != "" && string(l.stream) != q.Stream {
		return false
	}
	if q.RequestID != "" && string(l.request) != q.RequestID {
		return false
	}
	for k, v := range q.Fields {
		got, ok := l.field(k)
		if !ok || string(got) != v {
			return false
		}
	}
	if len(f.terms) > 0 {
		f.buf = asciiLower(f.buf[:0], l.message)
		for _, t := range f.terms {
			if !bytes.Contains(f.buf, t) {
				return false
			}
		}
	}
	return true
}

// QueryLogs returns one page of the lines q selects, in (time, seq) order, ascending or
// descending: the chunks that may hold them, scanned in order until the page is sure, merged
// with the lines of the old logs table.
func (db *DB) QueryLogs(ctx context.Context, q store.LogQuery) (*store.LogPage, error) {
	if q.TeamID == "" || q.SandboxID == "" {
		return nil, errors.New("query logs: team and sandbox are required")
	}
	limit := q.Limit
	if limit <= 0 {
		limit = defaultLogLimit
	}
	limit = min(limit, maxLogLimit)
	f, err := newLogFilter(&q)
	if err != nil {
		return nil, err
	}
	where := []string{"sandbox_id = ?", "team_id = ?"}
	args := []any{q.SandboxID, q.TeamID}
	add := func(cond string, a ...any) { where, args = append(where, cond), append(args, a...) }
	lo, hi := f.lo, f.hi
	if q.After != nil {
		if q.Backward {
			hi = min(hi, toMicros(q.After.Time))
		} else {
			lo = max(lo, toMicros(q.After.Time))
		}
	}
	if lo != math.MinInt64 {
		add("max_ts >= ?", lo)
	}
	if hi != math.MaxInt64 {
		add("min_ts <= ?", hi)
	}
	if f.minLevel > 0 {
		add("levels & ? != 0", 0xF&^(1<<f.minLevel-1))
	}
	if q.Source != "" {
		add("sources & ? != 0", sourceBit(q.Source))
	}
	if q.Stream != "" {
		add("streams & ? != 0", streamBit(q.Stream))
	}
	if q.RequestID != "" {
		add("id IN (SELECT chunk_id FROM log_chunk_requests WHERE request_id = ? AND team_id = ?)", q.RequestID, q.TeamID)
	}
	if keys := searchKeys(f.terms); keys != nil {
		add(filterFunc+"((SELECT filter FROM log_chunk_filters WHERE chunk_id = log_chunks.id), ?)", keys)
	}
	order := "min_ts, id"
	if q.Backward {
		order = "max_ts DESC, id DESC"
	}
	c := &lineCollector{backward: q.Backward, need: limit + 1}
	err = db.scanChunks(ctx, `SELECT sandbox_id, team_id, template_id, min_ts, max_ts, min_seq, data
		FROM log_chunks WHERE `+strings.Join(where, " AND ")+` ORDER BY `+order, args, c, f.match)
	if err != nil {
		return nil, fmt.Errorf("query logs of %s: %w", q.SandboxID, err)
	}
	old, err := db.queryOldLogs(ctx, q, limit)
	if err != nil {
		return nil, err
	}
	for _, l := range old {
		c.add(l)
	}
	c.settle()
	page := &store.LogPage{Lines: make([]store.LogLine, 0, min(len(c.lines), limit))}
	for _, l := range c.lines[:min(len(c.lines), limit)] {
		page.Lines = append(page.Lines, l.line)
	}
	if len(c.lines) > limit {
		page.Next = &store.LogPosition{Time: c.lines[limit-1].line.Time, Seq: c.lines[limit-1].seq}
	}
	return page, nil
}

// scanChunks runs query, whose rows are (sandbox_id, team_id, template_id, min_ts, max_ts,
// min_seq, data) in the collector's scan order, and offers c the lines that match, until no
// later chunk can change what c keeps.
func (db *DB) scanChunks(ctx context.Context, query string, args []any, c *lineCollector, match func(*chunkLine) bool) error {
	rows, err := db.read.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	var sandbox, team, template string
	var minTs, maxTs, minSeq int64
	var data sql.RawBytes
	var l chunkLine
	for rows.Next() {
		if err := rows.Scan(&sandbox, &team, &template, &minTs, &maxTs, &minSeq, &data); err != nil {
			return err
		}
		if c.done(minTs, maxTs) {
			break
		}
		d := chunkDecoder{b: data, minTs: minTs, minSeq: minSeq}
		for d.next(&l) {
			if !match(&l) || !c.wants(l.ts, l.seq) {
				continue
			}
			line, err := l.logLine(sandbox, team, template)
			if err != nil {
				return err
			}
			c.add(posLine{line: line, seq: l.seq})
		}
		if d.err != nil {
			return d.err
		}
	}
	return rows.Err()
}

// queryOldLogs returns up to limit+1 lines q selects from the logs table, written before
// migration 0006, in the query's order.
func (db *DB) queryOldLogs(ctx context.Context, q store.LogQuery, limit int) ([]posLine, error) {
	where := []string{"sandbox_id = ?", "team_id = ?"}
	args := []any{q.SandboxID, q.TeamID}
	add := func(cond string, a ...any) { where, args = append(where, cond), append(args, a...) }

	order, cmp := "ASC", ">"
	if q.Backward {
		order, cmp = "DESC", "<"
	}
	if !q.Cursor.IsZero() {
		ms := q.Cursor.UnixMilli()
		if q.Backward {
			add("ts <= ?", ms*1000+999)
		} else {
			add("ts >= ?", ms*1000)
		}
	}
	if q.After != nil {
		add("(ts, seq) "+cmp+" (?, ?)", toMicros(q.After.Time), q.After.Seq)
	}
	if q.MinLevel != "" {
		rank, ok := store.LogLevelRank(q.MinLevel)
		if !ok {
			return nil, fmt.Errorf("query logs: unknown level %q", q.MinLevel)
		}
		if rank > 0 {
			add("level >= ?", rank)
		}
	}
	for _, term := range searchTerms(q.Search) {
		add(`message LIKE ? ESCAPE '\'`, "%"+likeEscaper.Replace(term)+"%")
	}
	for k, v := range q.Fields {
		// The key is quoted, so dots and brackets in it are part of the name. A string
		// compares by its text, anything else by its JSON (5, true, null).
		path := `$."` + strings.ReplaceAll(k, `"`, `\"`) + `"`
		add("CASE WHEN json_type(fields, ?) = 'text' THEN fields ->> ? ELSE fields -> ? END = ?", path, path, path, v)
	}
	if q.RequestID != "" {
		add("request_id = ?", q.RequestID)
	}
	if q.Source != "" {
		add("source = ?", q.Source)
	}
	if q.Stream != "" {
		add("stream = ?", q.Stream)
	}
	if q.PID != 0 {
		add("pid = ?", q.PID)
	}
	rows, err := db.read.QueryContext(ctx, `SELECT `+logColumns+` FROM logs WHERE `+
		strings.Join(where, " AND ")+` ORDER BY ts `+order+`, seq `+order+` LIMIT ?`,
		append(args, limit+1)...)
	if err != nil {
		return nil, fmt.Errorf("query logs of %s: %w", q.SandboxID, err)
	}
	defer rows.Close()
	var out []posLine
	for rows.Next() {
		l, seq, err := scanLogLine(rows)
		if err != nil {
			return nil, fmt.Errorf("query logs of %s: %w", q.SandboxID, err)
		}
		out = append(out, posLine{line: l, seq: seq})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("query logs of %s: %w", q.SandboxID, err)
	}
	return out, nil
}

const logColumns = `ts, seq, sandbox_id, team_id, template_id, level, source, stream, pid, request_id, message, fields`

// scanLogLine reads one row of logColumns, returning the line and its seq.
func scanLogLine(row scanner) (store.LogLine, int64, error) {
	var l store.LogLine
	var ts, seq int64
	var level int
	var fields sql.NullString
	if err := row.Scan(&ts, &seq, &l.SandboxID, &l.TeamID, &l.TemplateID, &level, &l.Source,
		&l.Stream, &l.PID, &l.RequestID, &l.Message, &fields); err != nil {
		return l, 0, err
	}
	l.Time = fromMicros(ts)
	l.Level = store.LogLevels[max(0, min(level, len(store.LogLevels)-1))]
	if fields.Valid {
		if err := json.Unmarshal([]byte(fields.String), &l.Fields); err != nil {
			return l, 0, fmt.Errorf("fields: %w", err)
		}
	}
	return l, seq, nil
}

// PruneLogs deletes the chunks whose newest line is older than olderThan, at most
// pruneChunkRows chunks per transaction, and the old table's lines older than olderThan. A
// chunk that straddles olderThan is kept whole until all of its lines are older: a chunk
// spans one write batch, so its lines outlive the cutoff by at most the batch's time span.
// The count is of the lines deleted.
func (db *DB) PruneLogs(ctx context.Context, olderThan time.Time) (int64, error) {
	cutoff := toMicros(olderThan)
	var total int64
	for {
		rows, err := db.read.QueryContext(ctx, `SELECT id, lines FROM log_chunks WHERE max_ts < ?
			ORDER BY max_ts LIMIT ?`, cutoff, pruneChunkRows)
		if err != nil {
			return total, fmt.Errorf("prune logs: %w", err)
		}
		var ids, counts []int64
		for rows.Next() {
			var id, n int64
			if err := rows.Scan(&id, &n); err != nil {
				rows.Close()
				return total, fmt.Errorf("prune logs: %w", err)
			}
			ids, counts = append(ids, id), append(counts, n)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return total, fmt.Errorf("prune logs: %w", err)
		}
		if len(ids) == 0 {
			break
		}
		var deleted int64
		err = db.writeTx(ctx, func(tx *sql.Tx) error {
			deleted = 0
			for i, id := range ids {
				if _, err := tx.ExecContext(ctx, `DELETE FROM log_chunk_requests WHERE chunk_id = ?`, id); err != nil {
					return err
				}
				res, err := tx.ExecContext(ctx, `DELETE FROM log_chunks WHERE id = ?`, id)
				if err != nil {
					return err
				}
				if n, _ := res.RowsAffected(); n > 0 {
					deleted += counts[i]
				}
			}
			return nil
		})
		if err != nil {
			return total, fmt.Errorf("prune logs: %w", err)
		}
		total += deleted
	}
	n, err := db.pruneOldLogs(ctx, cutoff)
	return total + n, err
}

// pruneChunkRows bounds the chunks one prune transaction deletes.
const pruneChunkRows = 100

// pruneOldLogs deletes lines of the old logs table older than cutoff, sandbox by sandbox,
// in transactions of at most pruneChunk lines.
func (db *DB) pruneOldLogs(ctx context.Context, cutoff int64) (int64, error) {
	var total int64
	sandbox := ""
	for {
		// Walk the distinct sandboxes through the primary key, one seek each.
		err := db.read.QueryRowContext(ctx, `SELECT sandbox_id FROM logs WHERE sandbox_id > ?
			ORDER BY sandbox_id LIMIT 1`, sandbox).Scan(&sandbox)
		if errors.Is(err, sql.ErrNoRows) {
			return total, nil
		}
		if err != nil {
			return total, fmt.Errorf("prune logs: %w", err)
		}
		for {
			// Delete up to the ts of the pruneChunk-th oldest line, or up to the cutoff.
			bound := cutoff
			var ts int64
			err := db.read.QueryRowContext(ctx, `SELECT ts FROM logs WHERE sandbox_id = ? AND ts < ?
				ORDER BY ts LIMIT 1 OFFSET ?`, sandbox, cutoff, pruneChunk).Scan(&ts)
			switch {
			case err == nil:
				bound = ts
			case !errors.Is(err, sql.ErrNoRows):
				return total, fmt.Errorf("prune logs of %s: %w", sandbox, err)
			}
			res, err := db.write.ExecContext(ctx, `DELETE FROM logs WHERE sandbox_id = ? AND ts < ?`, sandbox, bound)
			if err != nil {
				return total, fmt.Errorf("prune logs of %s: %w", sandbox, err)
			}
			n, _ := res.RowsAffected()
			total += n
			if bound == cutoff {
				break
			}
			if n == 0 { // one microsecond holds more than pruneChunk lines
				res, err := db.write.ExecContext(ctx, `DELETE FROM logs WHERE sandbox_id = ? AND ts <= ?`, sandbox, bound)
				if err != nil {
					return total, fmt.Errorf("prune logs of %s: %w", sandbox, err)
				}
				n, _ := res.RowsAffected()
				total += n
			}
		}
	}
}

const commandColumns = `sandbox_id, pid, started_at, team_id, template_id, tag, request_id, user, command,
	args, cwd, ended_at, duration_us, exit_code, signal, end_cause, signal_request_id, kill_reason,
	stdout_bytes, stderr_bytes, stdout_head, stdout_tail, stderr_head, stderr_tail, truncated, redactions`

// UpsertCommand inserts c or merges it into the stored record with its key: text, times
// and counts c leaves zero, and a nil exit code, args or redactions, keep what is stored.
func (db *DB) UpsertCommand(ctx context.Context, c *store.CommandRecord) error {
	if c.SandboxID == "" || c.PID <= 0 || c.StartedAt.IsZero() {
		return errors.New("upsert command: sandbox, pid and start time are required")
	}
	args, err := jsonOrNull(c.Args, c.Args == nil)
	if err != nil {
		return fmt.Errorf("upsert command %s/%d: args: %w", c.SandboxID, c.PID, err)
	}
	redactions, err := jsonOrNull(c.Redactions, len(c.Redactions) == 0)
	if err != nil {
		return fmt.Errorf("upsert command %s/%d: redactions: %w", c.SandboxID, c.PID, err)
	}
	var ended sql.NullInt64
	duration := c.Duration
	if !c.EndedAt.IsZero() {
		ended = sql.NullInt64{Int64: toMicros(c.EndedAt), Valid: true}
		if duration == 0 {
			duration = c.EndedAt.Sub(c.StartedAt)
		}
	}
	var exit sql.NullInt64
	if c.ExitCode != nil {
		exit = sql.NullInt64{Int64: int64(*c.ExitCode), Valid: true}
	}
	text := func(col string) string {
		return col + ` = CASE WHEN excluded.` + col + ` != '' THEN excluded.` + col + ` ELSE commands.` + col + ` END`
	}
	num := func(col string) string {
		return col + ` = CASE WHEN excluded.` + col + ` != 0 THEN excluded.` + col + ` ELSE commands.` + col + ` END`
	}
	null := func(col string) string { return col + ` = coalesce(excluded.` + col + `, commands.` + col + `)` }
	set := []string{text("team_id"), text("template_id"), text("tag"), text("request_id"), text("user"),
		text("command"), null("args"), text("cwd"), null("ended_at"), num("duration_us"), null("exit_code"),
		text("signal"), text("end_cause"), text("signal_request_id"), text("kill_reason"),
		num("stdout_bytes"), num("stderr_bytes"), text("stdout_head"), text("stdout_tail"),
		text("stderr_head"), text("stderr_tail"), `truncated = max(excluded.truncated, commands.truncated)`,
		null("redactions")}
	_, err = db.write.ExecContext(ctx, `INSERT INTO commands (`+commandColumns+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (sandbox_id, pid, started_at) DO UPDATE SET `+strings.Join(set, ", "),
		c.SandboxID, c.PID, toMicros(c.StartedAt), c.TeamID, c.TemplateID, c.Tag, c.RequestID, c.User,
		c.Command, args, c.Cwd, ended, duration.Microseconds(), exit, c.Signal, c.EndCause,
		c.SignalRequestID, c.KillReason, c.StdoutBytes, c.StderrBytes, c.StdoutHead, c.StdoutTail,
		c.StderrHead, c.StderrTail, c.Truncated, redactions)
	if err != nil {
		return fmt.Errorf("upsert command %s/%d: %w", c.SandboxID, c.PID, err)
	}
	return nil
}

func scanCommand(row scanner) (*store.CommandRecord, error) {
	c := &store.CommandRecord{}
	var started, duration int64
	var ended, exit sql.NullInt64
	var args, redactions sql.NullString
	if err := row.Scan(&c.SandboxID, &c.PID, &started, &c.TeamID, &c.TemplateID, &c.Tag, &c.RequestID,
		&c.User, &c.Command, &args, &c.Cwd, &ended, &duration, &exit, &c.Signal, &c.EndCause,
		&c.SignalRequestID, &c.KillReason, &c.StdoutBytes, &c.StderrBytes, &c.StdoutHead, &c.StdoutTail,
		&c.StderrHead, &c.StderrTail, &c.Truncated, &redactions); err != nil {
		return nil, err
	}
	c.StartedAt = fromMicros(started)
	if ended.Valid {
		c.EndedAt = fromMicros(ended.Int64)
	}
	c.Duration = time.Duration(duration) * time.Microsecond
	if exit.Valid {
		code := int(exit.Int64)
		c.ExitCode = &code
	}
	if args.Valid {
		if err := json.Unmarshal([]byte(args.String), &c.Args); err != nil {
			return nil, fmt.Errorf("command %s/%d args: %w", c.SandboxID, c.PID, err)
		}
	}
	if redactions.Valid {
		if err := json.Unmarshal([]byte(redactions.String), &c.Redactions); err != nil {
			return nil, fmt.Errorf("command %s/%d redactions: %w", c.SandboxID, c.PID, err)
		}
	}
	return c, nil
}

// GetCommand returns the record of pid started at startedAt, or pid's latest when
// startedAt is zero.
func (db *DB) GetCommand(ctx context.Context, sandboxID string, pid int, startedAt time.Time) (*store.CommandRecord, error) {
	q, args := `SELECT `+commandColumns+` FROM commands WHERE sandbox_id = ? AND pid = ?`, []any{sandboxID, pid}
	if !startedAt.IsZero() {
		q, args = q+` AND started_at = ?`, append(args, toMicros(startedAt))
	}
	c, err := scanCommand(db.read.QueryRowContext(ctx, q+` ORDER BY started_at DESC LIMIT 1`, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("command %d of sandbox %s: %w", pid, sandboxID, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get command %d of sandbox %s: %w", pid, sandboxID, err)
	}
	return c, nil
}

// A command cursor is the (start, pid) of a page's last record: base64url("<unix µs>:<pid>").
func commandCursor(c *store.CommandRecord) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(toMicros(c.StartedAt), 10) + ":" + strconv.Itoa(c.PID)))
}

func parseCommandCursor(s string) (started int64, pid int, err error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return 0, 0, errors.New("not base64url")
	}
	us, p, ok := strings.Cut(string(b), ":")
	started, err1 := strconv.ParseInt(us, 10, 64)
	pid, err2 := strconv.Atoi(p)
	if !ok || err1 != nil || err2 != nil {
		return 0, 0, errors.New("malformed")
	}
	return started, pid, nil
}

// ListCommands returns the sandbox's records newest first, a page at a time.
func (db *DB) ListCommands(ctx context.Context, sandboxID string, limit int, cursor string) (*store.CommandPage, error) {
	if limit <= 0 {
		limit = defaultCommandLimit
	}
	limit = min(limit, maxCommandLimit)
	q, args := `SELECT `+commandColumns+` FROM commands WHERE sandbox_id = ?`, []any{sandboxID}
	if cursor != "" {
		started, pid, err := parseCommandCursor(cursor)
		if err != nil {
			return nil, fmt.Errorf("list commands: cursor %q: %w: %w", cursor, store.ErrBadCursor, err)
		}
		q, args = q+` AND (started_at, pid) < (?, ?)`, append(args, started, pid)
	}
	rows, err := db.read.QueryContext(ctx, q+` ORDER BY started_at DESC, pid DESC LIMIT ?`, append(args, limit+1)...)
	if err != nil {
		return nil, fmt.Errorf("list commands of %s: %w", sandboxID, err)
	}
	defer rows.Close()
	page := &store.CommandPage{Commands: []*store.CommandRecord{}}
	for rows.Next() {
		c, err := scanCommand(rows)
		if err != nil {
			return nil, fmt.Errorf("list commands of %s: %w", sandboxID, err)
		}
		page.Commands = append(page.Commands, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list commands of %s: %w", sandboxID, err)
	}
	if len(page.Commands) > limit {
		page.Commands = page.Commands[:limit]
		page.Next = commandCursor(page.Commands[limit-1])
	}
	return page, nil
}

// PruneCommands deletes records of commands that ended before olderThan. Records of
// commands still running stay.
func (db *DB) PruneCommands(ctx context.Context, olderThan time.Time) (int64, error) {
	res, err := db.write.ExecContext(ctx, `DELETE FROM commands WHERE ended_at IS NOT NULL AND ended_at < ?`,
		toMicros(olderThan))
	if err != nil {
		return 0, fmt.Errorf("prune commands: %w", err)
	}
	return res.RowsAffected()
}

// CloseOpenCommands ends the sandbox's records still open, with EndSandboxKilled and
// killReason: after a crash nobody else will.
func (db *DB) CloseOpenCommands(ctx context.Context, sandboxID string, at time.Time, killReason string) (int64, error) {
	end := toMicros(at)
	res, err := db.write.ExecContext(ctx, `UPDATE commands SET ended_at = ?, duration_us = MAX(0, ? - started_at),
		end_cause = ?, kill_reason = ? WHERE sandbox_id = ? AND ended_at IS NULL`,
		end, end, store.EndSandboxKilled, killReason, sandboxID)
	if err != nil {
		return 0, fmt.Errorf("close open commands of %s: %w", sandboxID, err)
	}
	return res.RowsAffected()
}
