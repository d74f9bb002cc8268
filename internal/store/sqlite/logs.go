package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"time"

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
)

// logSeq numbers stored lines. Starting from the clock's nanoseconds keeps the numbers
// rising across restarts, so lines of the same microsecond stay in insertion order.
var logSeq atomic.Int64

func init() { logSeq.Store(time.Now().UnixNano()) }

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
	seqs := make([]int64, len(lines))
	for i := range lines {
		seqs[i] = first + int64(i)
	}
	if err := db.writeTx(ctx, func(tx *sql.Tx) error { return insertChunks(ctx, tx, lines, seqs) }); err != nil {
		return fmt.Errorf("insert %d log lines: %w", len(lines), err)
	}
	return nil
}

// insertChunks writes lines, numbered seqs, as chunks in tx: one per (sandbox, team,
// template) of the batch, or more past maxChunkLines or maxChunkBytes.
func insertChunks(ctx context.Context, tx *sql.Tx, lines []store.LogLine, seqs []int64) error {
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
		g.seqs = append(g.seqs, seqs[i])
	}
	insChunk, err := tx.PrepareContext(ctx, `INSERT INTO log_chunks (sandbox_id, team_id, template_id,
		min_ts, max_ts, min_seq, max_seq, lines, levels, sources, streams, data)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
	if err != nil {
		return err
	}
	defer insChunk.Close()
	var filters []any // chunk id, filter: written with one statement at the end
	var insReq *sql.Stmt
	defer func() {
		if insReq != nil {
			insReq.Close()
		}
	}()
	c := chunkBuilder{filter: filterBuilders.Get().(*filterBuilder)}
	defer filterBuilders.Put(c.filter)
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
			filters = append(filters, id, bytes.Clone(c.filter.filter()))
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
	return insertFilters(ctx, tx, filters)
}

// QueryLogs returns one page of the lines q selects, in (time, seq) order, ascending or
// descending: the chunks that may hold them, scanned in order until the page is sure.
func (db *DB) QueryLogs(ctx context.Context, q store.LogQuery) (*store.LogPage, error) {
	if q.TeamID == "" {
		return nil, errors.New("query logs: team is required")
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
	where, args := logScope(&q)
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
	c.settle()
	page := &store.LogPage{Lines: make([]store.LogLine, 0, min(len(c.lines), limit))}
	for _, l := range c.lines[:min(len(c.lines), limit)] {
		page.Lines = append(page.Lines, l.line)
	}
	if n := min(len(c.lines), limit); n > 0 {
		page.First = &store.LogPosition{Time: c.lines[0].line.Time, Seq: c.lines[0].seq}
		page.Last = &store.LogPosition{Time: c.lines[n-1].line.Time, Seq: c.lines[n-1].seq}
	}
	if len(c.lines) > limit {
		page.Next = &store.LogPosition{Time: c.lines[limit-1].line.Time, Seq: c.lines[limit-1].seq}
	}
	return page, nil
}

// logScope is the WHERE terms (and their arguments) that pick q's team, sandbox and
// template.
func logScope(q *store.LogQuery) ([]string, []any) {
	where, args := []string{"team_id = ?"}, []any{q.TeamID}
	if q.SandboxID != "" {
		where, args = append(where, "sandbox_id = ?"), append(args, q.SandboxID)
	}
	if q.TemplateID != "" {
		where, args = append(where, "template_id = ?"), append(args, q.TemplateID)
	}
	if q.SandboxIn != nil {
		if len(q.SandboxIn) == 0 {
			return append(where, "0"), args
		}
		where = append(where, "sandbox_id IN ("+strings.TrimSuffix(strings.Repeat("?, ", len(q.SandboxIn)), ", ")+")")
		for _, id := range q.SandboxIn {
			args = append(args, id)
		}
	}
	return where, args
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
