// Package redact masks secrets in text before it reaches a log line, event, command record,
// webhook body or log-store row.
//
// The one idea: a Redactor masks in two passes over a piece of text. First the exact values it
// was told about (API keys, access tokens, the values of secret env vars), byte for byte; then
// well-known shapes of secrets (bearer tokens, URL passwords, AWS keys, PEM private keys, JWTs,
// E2B/Cove and vendor API keys, values of keys whose names look secret). Every secret becomes
// "[REDACTED:kind]", kind being one of the Kind constants, so a reader knows why text is gone
// without learning anything about it. Masks always cover whole UTF-8 sequences, so valid input
// gives valid output.
//
// A Redactor is cheap to derive: a sandbox's redactor is the global one plus its own secrets
// (With), and secrets added to the global one later are seen by every derived redactor.
package redact

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"
	"unsafe"
)

// DefaultMinSecretLen is the shortest exact secret a Redactor masks when Options.MinSecretLen
// is zero. Shorter values ("1", "true", "admin") would mask innocent text everywhere.
const DefaultMinSecretLen = 6

// Options configures a Redactor.
type Options struct {
	// MinSecretLen is the shortest value AddSecret accepts; shorter values are counted as
	// skipped. Zero means DefaultMinSecretLen.
	MinSecretLen int
	// Secrets are exact values to mask from the start, as if passed to AddSecret.
	Secrets []string
}

// Kind is why a piece of text was masked. It appears in the mask: "[REDACTED:bearer]".
type Kind string

// The kinds of masks, in the order a Redactor applies them.
const (
	KindExact          Kind = "exact"           // a value given to AddSecret or With
	KindBearer         Kind = "bearer"          // the token after "Bearer "
	KindURLCredentials Kind = "url_credentials" // the password in scheme://user:password@host
	KindAWSKey         Kind = "aws_key"         // AKIA…/ASIA… key ids, aws_secret_access_key values
	KindPrivateKey     Kind = "private_key"     // a whole PEM "PRIVATE KEY" block
	KindJWT            Kind = "jwt"             // eyJ….eyJ….sig
	KindAPIKey         Kind = "api_key"         // e2b_…, cove_admin_…, ghp_…, sk-…, xox…-, hf_…, glpat-…
	KindKeyValue       Kind = "key_value"       // the value in key=value, key: value, "key": "value"
)

// kinds lists Kind by internal index; masks holds each kind's mask.
var (
	kinds = [...]Kind{KindExact, KindBearer, KindURLCredentials, KindAWSKey, KindPrivateKey, KindJWT, KindAPIKey, KindKeyValue}
	masks [len(kinds)]string
)

const (
	kExact uint8 = iota
	kBearer
	kURL
	kAWS
	kPEM
	kJWT
	kAPIKey
	kKeyValue
)

func init() {
	for i, k := range kinds {
		masks[i] = "[REDACTED:" + string(k) + "]"
	}
}

// maskPrefix starts every mask; patterns do not re-mask text that starts with it.
const maskPrefix = "[REDACTED"

// String returns the kind's name.
func (k Kind) String() string {
	if k == "" {
		return "unknown"
	}
	return string(k)
}

// ParseKind returns the Kind named s, or an error for an unknown name.
func ParseKind(s string) (Kind, error) {
	for _, k := range kinds {
		if string(k) == s {
			return k, nil
		}
	}
	return "", fmt.Errorf("unknown redaction kind %q", s)
}

// Counts says how many masks of each kind a call applied. Overlapping matches count once.
type Counts struct {
	Exact, Bearer, URLCredentials, AWSKey, PrivateKey, JWT, APIKey, KeyValue int
}

func (c *Counts) inc(k uint8) {
	switch k {
	case kExact:
		c.Exact++
	case kBearer:
		c.Bearer++
	case kURL:
		c.URLCredentials++
	case kAWS:
		c.AWSKey++
	case kPEM:
		c.PrivateKey++
	case kJWT:
		c.JWT++
	case kAPIKey:
		c.APIKey++
	default:
		c.KeyValue++
	}
}

// Of returns the count for kind k.
func (c Counts) Of(k Kind) int {
	switch k {
	case KindExact:
		return c.Exact
	case KindBearer:
		return c.Bearer
	case KindURLCredentials:
		return c.URLCredentials
	case KindAWSKey:
		return c.AWSKey
	case KindPrivateKey:
		return c.PrivateKey
	case KindJWT:
		return c.JWT
	case KindAPIKey:
		return c.APIKey
	case KindKeyValue:
		return c.KeyValue
	}
	return 0
}

// Total is the number of masks applied.
func (c Counts) Total() int {
	return c.Exact + c.Bearer + c.URLCredentials + c.AWSKey + c.PrivateKey + c.JWT + c.APIKey + c.KeyValue
}

// Add adds o to c, for callers that redact many pieces of one record.
func (c *Counts) Add(o Counts) {
	c.Exact += o.Exact
	c.Bearer += o.Bearer
	c.URLCredentials += o.URLCredentials
	c.AWSKey += o.AWSKey
	c.PrivateKey += o.PrivateKey
	c.JWT += o.JWT
	c.APIKey += o.APIKey
	c.KeyValue += o.KeyValue
}

// String lists the non-zero counts, "exact=2 bearer=1", or "none".
func (c Counts) String() string {
	var b strings.Builder
	for _, k := range kinds {
		if n := c.Of(k); n > 0 {
			if b.Len() > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprintf(&b, "%s=%d", k, n)
		}
	}
	if b.Len() == 0 {
		return "none"
	}
	return b.String()
}

// A Redactor masks secrets in text. It is safe for concurrent use; AddSecret may run while
// other goroutines redact. The zero value is not usable; a nil *Redactor masks patterns only.
type Redactor struct {
	parent *Redactor
	minLen int
	mu     sync.Mutex // serializes AddSecret
	set    atomic.Pointer[secretSet]
	added  func(own []string) // OnAdd's; called under mu
}

// New returns a Redactor with the options' secrets.
func New(opts Options) *Redactor {
	r := &Redactor{minLen: opts.MinSecretLen}
	if r.minLen <= 0 {
		r.minLen = DefaultMinSecretLen
	}
	r.set.Store(newSecretSet(nil, 0, opts.Secrets, r.minLen))
	return r
}

// With returns a Redactor that masks r's secrets (including those added to r later) plus
// secrets. r is not changed.
func (r *Redactor) With(secrets ...string) *Redactor {
	minLen := DefaultMinSecretLen
	if r != nil {
		minLen = r.minLen
	}
	c := &Redactor{parent: r, minLen: minLen}
	c.set.Store(newSecretSet(nil, 0, secrets, minLen))
	return c
}

// AddSecret makes r mask value wherever it appears. Values shorter than the minimum length are
// not masked and are counted in Skipped instead.
func (r *Redactor) AddSecret(value string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := r.set.Load()
	if len(value) >= r.minLen && slices.Contains(cur.secrets, value) {
		return
	}
	next := newSecretSet(cur.secrets, cur.skipped, []string{value}, r.minLen)
	r.set.Store(next)
	if r.added != nil && len(next.secrets) > len(cur.secrets) {
		r.added(slices.Clone(next.secrets))
	}
}

// Own returns the exact secrets r masks beyond its parents' (With's and AddSecret's).
func (r *Redactor) Own() []string { return slices.Clone(r.set.Load().secrets) }

// OnAdd makes r call f with all of its own secrets (Own) each time AddSecret adds one,
// before AddSecret returns, one call at a time: a caller that keeps them (to mask the same
// secrets after a restart) never has a newer set overwritten by an older one.
func (r *Redactor) OnAdd(f func(own []string)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.added = f
}

// Skipped is how many values given to r (not its parents) were too short to mask.
func (r *Redactor) Skipped() int { return r.set.Load().skipped }

// Len is how many exact secrets r masks, its parents' included.
func (r *Redactor) Len() int {
	n := 0
	for ; r != nil; r = r.parent {
		n += len(r.set.Load().secrets)
	}
	return n
}

// String returns s with secrets masked, and what was masked. With nothing to mask it returns s
// itself without allocating.
func (r *Redactor) String(s string) (string, Counts) {
	s, c := r.Exact(s)
	var buf [8]span
	spans := findPatterns(s, buf[:0])
	if len(spans) > 0 {
		s = apply(s, spans, &c)
	}
	return s, c
}

// Exact returns s with only the exact secrets masked (no patterns): for values the user
// chose, such as metadata, where a pattern would mask innocent text.
func (r *Redactor) Exact(s string) (string, Counts) {
	var c Counts
	var buf [8]span
	spans := buf[:0]
	for p := r; p != nil; p = p.parent {
		spans = p.set.Load().find(s, spans)
	}
	if len(spans) > 0 {
		s = apply(s, spans, &c)
	}
	return s, c
}

// Bytes is String for a byte slice. With nothing to mask it returns b itself.
func (r *Redactor) Bytes(b []byte) ([]byte, Counts) {
	if len(b) == 0 {
		return b, Counts{}
	}
	in := unsafe.String(unsafe.SliceData(b), len(b))
	out, c := r.String(in)
	if c.Total() == 0 {
		return b, c
	}
	return []byte(out), c
}

// span is a byte range [start, end) of text to mask as kind.
type span struct {
	start, end int
	kind       uint8
}

// apply replaces the union of spans in s with masks, counting one mask per merged range. The
// kind of a merged range is that of its earliest span. Ranges are widened to whole UTF-8
// sequences.
func apply(s string, spans []span, c *Counts) string {
	if len(spans) > 1 {
		slices.SortFunc(spans, func(a, b span) int {
			if a.start != b.start {
				return a.start - b.start
			}
			if a.end != b.end {
				return b.end - a.end
			}
			return int(a.kind) - int(b.kind)
		})
	}
	var b strings.Builder
	b.Grow(len(s) + 16*len(spans))
	last := 0
	for i := 0; i < len(spans); {
		st, en, k := spans[i].start, spans[i].end, spans[i].kind
		for n := 0; n < 3 && st > last && !utf8.RuneStart(s[st]); n++ {
			st--
		}
		for i++; ; i++ {
			for n := 0; n < 3 && en < len(s) && !utf8.RuneStart(s[en]); n++ {
				en++
			}
			if i == len(spans) || spans[i].start >= en {
				break
			}
			en = max(en, spans[i].end)
		}
		b.WriteString(s[last:st])
		b.WriteString(masks[k])
		c.inc(k)
		last = en
	}
	b.WriteString(s[last:])
	return b.String()
}

// Kinds lists every Kind, in the order masks are applied.
func Kinds() []Kind { return append([]Kind(nil), kinds[:]...) }
