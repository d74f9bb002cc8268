package redact

import (
	"slices"
	"strings"
	"sync"
)

// acThreshold is the number of secrets from which a secretSet matches with an Aho-Corasick
// automaton instead of one strings.Index scan per secret. strings.Index is vectorized, so a
// scan per secret wins for a handful of secrets; see BenchmarkExact.
const acThreshold = 4

// secretSet is an immutable set of exact secrets; AddSecret replaces it whole.
type secretSet struct {
	secrets []string
	skipped int

	once sync.Once
	ac   *automaton // built on first use when len(secrets) >= acThreshold
}

// newSecretSet returns old plus the values at least minLen long; shorter ones add to skipped.
func newSecretSet(old []string, skipped int, values []string, minLen int) *secretSet {
	s := &secretSet{secrets: slices.Clip(old), skipped: skipped}
	for _, v := range values {
		switch {
		case len(v) < minLen:
			s.skipped++
		case !slices.Contains(s.secrets, v):
			s.secrets = append(s.secrets, v)
		}
	}
	s.secrets = slices.Clip(s.secrets)
	return s
}

// find appends a span for every occurrence of every secret in text.
func (s *secretSet) find(text string, spans []span) []span {
	if len(s.secrets) == 0 {
		return spans
	}
	if len(s.secrets) >= acThreshold {
		s.once.Do(func() { s.ac = newAutomaton(s.secrets) })
		return s.ac.find(text, spans)
	}
	return findEach(text, s.secrets, spans)
}

// findEach scans text once per secret.
func findEach(text string, secrets []string, spans []span) []span {
	for _, sec := range secrets {
		for i := 0; i+len(sec) <= len(text); {
			j := strings.Index(text[i:], sec)
			if j < 0 {
				break
			}
			spans = append(spans, span{i + j, i + j + len(sec), kExact})
			i += j + 1 // overlapping occurrences too: "aaaaaaa" holds "aaaaaa" twice
		}
	}
	return spans
}

// automaton is an Aho-Corasick matcher with a dense transition table over the byte classes
// that occur in the secrets (all other bytes share class 0). A transition holds the target's
// row offset in next, complemented (negative) when a secret ends in the target state, so the
// inner loop is one load per byte.
type automaton struct {
	class   [256]int32
	nclass  int
	next    []int32
	longest []int32 // by state: the length of the longest secret ending there, or 0
}

func newAutomaton(secrets []string) *automaton {
	a := &automaton{nclass: 1}
	for _, s := range secrets {
		for i := 0; i < len(s); i++ {
			if a.class[s[i]] == 0 {
				a.class[s[i]] = int32(a.nclass)
				a.nclass++
			}
		}
	}
	// The trie: goto edges by state number, -1 for none.
	nc := int32(a.nclass)
	next := make([]int32, nc, int(nc)*16)
	for i := range next {
		next[i] = -1
	}
	a.longest = []int32{0}
	for _, s := range secrets {
		st := int32(0)
		for i := 0; i < len(s); i++ {
			c := a.class[s[i]]
			if next[st*nc+c] < 0 {
				n := int32(len(a.longest))
				a.longest = append(a.longest, 0)
				for range nc {
					next = append(next, -1)
				}
				next[st*nc+c] = n
			}
			st = next[st*nc+c]
		}
		a.longest[st] = max(a.longest[st], int32(len(s)))
	}
	// Breadth first: fill failure transitions into the table and inherit the longest match of
	// the failure state (a suffix of this state's string).
	fail := make([]int32, len(a.longest))
	queue := make([]int32, 0, len(a.longest))
	for c := range nc {
		if n := next[c]; n < 0 {
			next[c] = 0
		} else {
			queue = append(queue, n)
		}
	}
	for len(queue) > 0 {
		st := queue[0]
		queue = queue[1:]
		a.longest[st] = max(a.longest[st], a.longest[fail[st]])
		for c := range nc {
			n := next[st*nc+c]
			if n < 0 {
				next[st*nc+c] = next[fail[st]*nc+c]
				continue
			}
			fail[n] = next[fail[st]*nc+c]
			queue = append(queue, n)
		}
	}
	// Row offsets, complemented for states where a secret ends.
	for i, n := range next {
		next[i] = n * nc
		if a.longest[n] > 0 {
			next[i] = ^next[i]
		}
	}
	a.next = next
	return a
}

// find appends, for every position where a secret ends, a span over the longest one; shorter
// secrets ending there lie inside it.
func (a *automaton) find(text string, spans []span) []span {
	row := int32(0)
	for i := 0; i < len(text); i++ {
		row = a.next[row+a.class[text[i]]]
		if row < 0 {
			row = ^row
			n := int(a.longest[row/int32(a.nclass)])
			spans = append(spans, span{i + 1 - n, i + 1, kExact})
		}
	}
	return spans
}
