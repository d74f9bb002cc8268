package sqlite

import (
	"bytes"
	"context"
	"fmt"
	"math/rand"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/store"
)

// filterOf builds the filter of msgs as InsertLogs does.
func filterOf(msgs ...string) []byte {
	var b filterBuilder
	text := 0
	for _, m := range msgs {
		text += len(m)
	}
	b.reset(text)
	for _, m := range msgs {
		addMessage(&b, m)
	}
	return slices.Clone(b.filter())
}

func mayHold(filter []byte, search string) bool {
	var terms [][]byte
	for _, t := range store.SearchTerms(search) {
		terms = append(terms, asciiLower(nil, []byte(t)))
	}
	return filterMayHold(filter, searchKeys(terms))
}

// asciiUpper raises ASCII letters only: strings.ToUpper would replace a cut rune.
func asciiUpper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'a' <= c && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}

// randomMessage is a line of words, ids, punctuation and a little UTF-8.
func randomMessage(r *rand.Rand) string {
	parts := []string{"connecting", "to", "db", "ERROR", "Timeout", "id=", "req_7", "é", "日本", "/var/log", "-", "x", "[", "]", ":", "\t"}
	var b strings.Builder
	for range 3 + r.Intn(12) {
		if r.Intn(3) == 0 {
			fmt.Fprintf(&b, "%d", r.Intn(10_000_000))
		} else {
			b.WriteString(parts[r.Intn(len(parts))])
		}
		if r.Intn(2) == 0 {
			b.WriteByte(" .,=/"[r.Intn(5)])
		}
	}
	return b.String()
}

func TestAChunkFilterNeverHidesALineThatMatches(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewSource(1))
	for round := range 300 {
		msgs := make([]string, 1+r.Intn(200))
		for i := range msgs {
			msgs[i] = randomMessage(r)
		}
		f := filterOf(msgs...)
		// Every substring of every line, at any case, is found, as a word or a phrase.
		for range 50 {
			m := msgs[r.Intn(len(msgs))]
			i := r.Intn(len(m))
			j := i + 1 + r.Intn(len(m)-i)
			sub := m[i:j]
			if r.Intn(2) == 0 {
				sub = asciiUpper(sub)
			}
			search := `"` + sub + `"`
			if strings.ContainsAny(sub, "\" \t") {
				continue // a term is cut at spaces and quotes; TestQueryLogsWithFilters covers words
			}
			if !mayHold(f, search) {
				t.Fatalf("round %d: filter of %d lines skips %q, a substring of %q", round, len(msgs), search, m)
			}
		}
	}
}

func TestAChunkFilterSkipsWhatNoLineHolds(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewSource(2))
	var msgs []string
	for i := range 2000 {
		msgs = append(msgs, fmt.Sprintf("request handled cache miss worker started id=%d", 100000+r.Intn(900000)+i%2))
	}
	f := filterOf(msgs...)
	if len(f) >= 64<<10 {
		t.Errorf("the filter of 2000 lines takes %d bytes, want it folded well below 64 KiB", len(f))
	}
	for _, tt := range []struct {
		name   string
		search string
		want   bool
	}{
		{"a word every line holds may be there", "cache", true},
		{"a prefix of a word may be there", "work", true},
		{"a phrase across words may be there", `"e miss wor"`, true},
		{"a short term cannot be filtered", "zq", true},
		{"a word no line holds is skipped", "absent_word", false},
		{"an id no line holds is skipped though its digits are everywhere", "id=1234567", false},
		{"one absent word among present ones is skipped", "cache deprecated", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := mayHold(f, tt.search); got != tt.want {
				t.Errorf("mayHold(%q) = %v, want %v", tt.search, got, tt.want)
			}
		})
	}
	// The false positive rate of absent ids stays near the design's.
	skipped := 0
	for i := range 1000 {
		if !mayHold(f, fmt.Sprintf("id=%d", 2_000_000+i)) {
			skipped++
		}
	}
	if skipped < 900 {
		t.Errorf("only %d of 1000 absent ids skipped", skipped)
	}
}

func TestQueryLogsWithFiltersFindsWhatAScanFinds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newDB(t)
	r := rand.New(rand.NewSource(3))
	var all []string
	for batch := range 20 {
		var lines []store.LogLine
		for i := range 100 {
			m := randomMessage(r)
			all = append(all, m)
			lines = append(lines, logLine("team", "sb", base.Add(time.Duration(batch*100+i)*time.Millisecond), "info", m))
		}
		if err := db.InsertLogs(ctx, lines); err != nil {
			t.Fatal(err)
		}
	}
	var searches []string
	for range 200 {
		m := all[r.Intn(len(all))]
		w := strings.Fields(m)
		searches = append(searches, w[r.Intn(len(w))], asciiUpper(w[r.Intn(len(w))]))
		if i := r.Intn(len(m)); !strings.ContainsAny(m[i:min(len(m), i+9)], "\"") {
			searches = append(searches, `"`+m[i:min(len(m), i+9)]+`"`)
		}
	}
	searches = append(searches, "id=", "absent_word", "req_7 é", "日本")
	for _, s := range searches {
		var want []string
		for _, m := range all {
			lm := asciiLower(nil, []byte(m))
			ok := true
			for _, term := range store.SearchTerms(s) {
				ok = ok && bytes.Contains(lm, asciiLower(nil, []byte(term)))
			}
			if ok {
				want = append(want, m)
			}
		}
		page, err := db.QueryLogs(ctx, store.LogQuery{TeamID: "team", SandboxID: "sb", Search: s, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		want = append([]string{}, want[:min(len(want), 1000)]...)
		if got := messages(page); !slices.Equal(got, want) {
			t.Fatalf("search %q: %d lines, a scan finds %d", s, len(got), len(want))
		}
	}
}

func TestMigratingToChunkFiltersFillsThemForOldChunks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "cove.db")
	db := open(t, path)
	var lines []store.LogLine
	for i := range 3000 {
		lines = append(lines, logLine("team", "sb", base.Add(time.Duration(i)*time.Millisecond), "info", fmt.Sprintf("line %d of the old schema", i)))
	}
	for b := 0; b < len(lines); b += 100 {
		if err := db.InsertLogs(ctx, lines[b:b+100]); err != nil {
			t.Fatal(err)
		}
	}
	// Back to the schema before migration 0012: no filters, no trigger, no record of it.
	for _, q := range []string{`DROP TRIGGER log_chunk_filters_gc`, `DROP TABLE log_chunk_filters`,
		`DELETE FROM schema_migrations WHERE version = 12`} {
		if _, err := db.write.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()

	db = open(t, path)
	deadline := time.Now().Add(time.Minute)
	for {
		n, err := db.logFiltersPending(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d chunks still without a filter after a minute", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	var filters int
	db.read.QueryRowContext(ctx, `SELECT count(*) FROM log_chunk_filters`).Scan(&filters)
	if filters != 30 {
		t.Errorf("%d filters, want one for each of the 30 chunks", filters)
	}
	for search, want := range map[string]int{"line 2999 ": 1, `"of the old"`: 1000, "absent_word": 0} {
		page, err := db.QueryLogs(ctx, store.LogQuery{TeamID: "team", SandboxID: "sb", Search: search, Limit: 1000})
		if err != nil || len(page.Lines) != want {
			t.Errorf("search %q after the migration: %d lines, %v; want %d", search, len(page.Lines), err, want)
		}
	}
	// Pruning a chunk takes its filter with it.
	if _, err := db.PruneLogs(ctx, base.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	db.read.QueryRowContext(ctx, `SELECT count(*) FROM log_chunk_filters`).Scan(&filters)
	if filters != 0 {
		t.Errorf("%d filters left after every chunk was pruned", filters)
	}
}
