package redact

import "strings"

// findPatterns appends spans for the known shapes of secrets in s. One pass looks for the rare
// bytes that every shape holds ('_', '-', ':', '=', 'J' of eyJ, 'K'/'S' of AKIA/ASIA, 'b' of
// bearer) and only there tries the shapes, so plain text costs about a nanosecond a byte.
func findPatterns(s string, spans []span) []span {
	for i := 0; i < len(s); i++ {
		if !triggers[s[i]] {
			continue
		}
		next := i
		switch s[i] {
		case 'b', 'B':
			spans, next = bearerAt(s, i, spans)
		case ':':
			if strings.HasPrefix(s[i:], "://") {
				spans, next = urlCredentialsAt(s, i, spans)
			} else {
				spans, next = keyValueAt(s, i, spans)
			}
		case '=':
			if strings.HasPrefix(s[i:], "==") {
				next = i + 1 // a comparison
			} else {
				spans, next = keyValueAt(s, i, spans)
			}
		case 'K', 'S':
			spans, next = awsKeyIDAt(s, i-1, spans)
		case 'J':
			spans, next = jwtAt(s, i-2, spans)
		case '-':
			if strings.HasPrefix(s[i:], "-----BEGIN ") {
				spans, next = privateKeyAt(s, i, spans)
			} else {
				spans, next = apiKeyAt(s, i, spans)
			}
		case '_':
			spans, next = apiKeyAt(s, i, spans)
		}
		i = max(i, next-1)
	}
	return spans
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func isHex(c byte) bool { return isDigit(c) || 'a' <= c && c <= 'f' }

func isUpperOrDigit(c byte) bool { return isDigit(c) || 'A' <= c && c <= 'Z' }

// isB64URL reports bytes of base64url, the alphabet of JWT segments.
func isB64URL(c byte) bool { return isAlnum(c) || c == '-' || c == '_' }

// isB64Token reports bytes of RFC 6750 b64token, the alphabet of bearer tokens.
func isB64Token(c byte) bool {
	return isAlnum(c) || strings.IndexByte("-._~+/=", c) >= 0
}

// run returns the end of the run of bytes in s from i that satisfy ok.
func run(s string, i int, ok func(byte) bool) int {
	for i < len(s) && ok(s[i]) {
		i++
	}
	return i
}

// wordStart reports whether s[i] starts a word: nothing alphanumeric right before it.
func wordStart(s string, i int) bool { return i == 0 || !isAlnum(s[i-1]) }

// bearerAt masks the token after "Bearer " (any case) starting at i. Prose ("a bearer
// token") is left alone: the token must be at least 8 bytes and hold a digit, a symbol or an
// inner capital.
func bearerAt(s string, i int, spans []span) ([]span, int) {
	const word = "bearer"
	if len(s)-i < len(word)+1 || !wordStart(s, i) || !strings.EqualFold(s[i:i+len(word)], word) {
		return spans, i + 1
	}
	j := i + len(word)
	k := run(s, j, func(c byte) bool { return c == ' ' || c == '\t' })
	if k == j {
		return spans, j
	}
	end := run(s, k, isB64Token)
	if end-k < 8 || !tokenish(s[k:end]) {
		return spans, k
	}
	return append(spans, span{k, end, kBearer}), end
}

// tokenish reports whether t looks generated rather than like a word.
func tokenish(t string) bool {
	for i := 0; i < len(t); i++ {
		c := t[i]
		if isDigit(c) || i > 0 && 'A' <= c && c <= 'Z' || !isAlnum(c) {
			return true
		}
	}
	return false
}

// urlCredentialsAt masks the password in scheme://user:password@host, i being the index of
// "://". A userinfo without a password is masked whole when it looks like a token
// (https://<token>@github.com).
func urlCredentialsAt(s string, i int, spans []span) ([]span, int) {
	j := i + 3
	end := j
	at := -1
	for ; end < len(s) && strings.IndexByte("/?# \t\r\n\"'<>\\`", s[end]) < 0; end++ {
		if s[end] == '@' {
			at = end
		}
	}
	if at < 0 {
		return spans, j
	}
	user := s[j:at]
	if strings.HasPrefix(user, maskPrefix) {
		return spans, end
	}
	if c := strings.IndexByte(user, ':'); c >= 0 {
		if pw := user[c+1:]; pw != "" && !strings.HasPrefix(pw, maskPrefix) {
			spans = append(spans, span{j + c + 1, at, kURL})
		}
	} else if len(user) >= 20 && tokenish(user) {
		spans = append(spans, span{j, at, kURL})
	}
	return spans, end
}

// awsKeyIDAt masks an AWS access key id starting at i: AKIA (long-term) or ASIA (temporary)
// plus 16 upper-case letters or digits.
func awsKeyIDAt(s string, i int, spans []span) ([]span, int) {
	end := i + 4 + 16
	if i < 0 || end > len(s) || s[i:i+4] != "AKIA" && s[i:i+4] != "ASIA" || !wordStart(s, i) ||
		run(s, i+4, isUpperOrDigit) != end {
		return spans, i + 2
	}
	return append(spans, span{i, end, kAWS}), end
}

// privateKeyAt masks a PEM block starting at i whose label holds "PRIVATE KEY", from BEGIN to
// the end of the END line; a block cut short is masked to the end of the text.
func privateKeyAt(s string, i int, spans []span) ([]span, int) {
	const begin, end, dashes = "-----BEGIN ", "-----END ", "-----"
	j := i + len(begin)
	k := strings.Index(s[j:min(len(s), j+64+len(dashes))], dashes)
	if k < 0 || !strings.Contains(s[j:j+k], "PRIVATE KEY") {
		return spans, j
	}
	e := strings.Index(s[j+k:], end)
	if e < 0 {
		return append(spans, span{i, len(s), kPEM}), len(s)
	}
	stop := j + k + e + len(end)
	if d := strings.Index(s[stop:], dashes); d >= 0 && d <= 64 {
		stop += d + len(dashes)
	} else {
		stop = len(s)
	}
	return append(spans, span{i, stop, kPEM}), stop
}

// jwtAt masks header.payload.signature starting at i, where header and payload are base64url
// JSON objects (both start "eyJ", the encoding of `{"`). The signature may be empty (alg
// "none").
func jwtAt(s string, i int, spans []span) ([]span, int) {
	if i < 0 || !strings.HasPrefix(s[i:], "eyJ") || i > 0 && (isB64URL(s[i-1]) || s[i-1] == '.') {
		return spans, i + 3
	}
	h := run(s, i, isB64URL)
	if h-i < 10 || h >= len(s) || s[h] != '.' || !strings.HasPrefix(s[h+1:], "eyJ") {
		return spans, i + 3
	}
	p := run(s, h+1, isB64URL)
	if p-h-1 < 10 || p >= len(s) || s[p] != '.' {
		return spans, i + 3
	}
	end := run(s, p+1, isB64URL)
	return append(spans, span{i, end, kJWT}), end
}

// apiKeyShape is a vendor key: a literal prefix and a run of at least min bytes of an alphabet.
type apiKeyShape struct {
	prefix string
	ok     func(byte) bool
	min    int
}

func isAlnumUnderscore(c byte) bool { return isAlnum(c) || c == '_' }
func isAlnumDash(c byte) bool       { return isAlnum(c) || c == '-' }

var apiKeyShapes = [...]apiKeyShape{
	{"e2b_", isHex, 20},        // E2B / Cove team API keys: e2b_<40 hex>
	{"cove_admin_", isHex, 16}, // the Cove admin token: cove_admin_<48 hex>
	{"ghp_", isAlnum, 30},      // GitHub personal access token
	{"gho_", isAlnum, 30},      // GitHub OAuth token
	{"ghu_", isAlnum, 30},      // GitHub user-to-server token
	{"ghs_", isAlnum, 30},      // GitHub server-to-server token
	{"ghr_", isAlnum, 30},      // GitHub refresh token
	{"github_pat_", isAlnumUnderscore, 22},
	{"glpat-", isB64URL, 20},   // GitLab personal access token
	{"sk-", isB64URL, 20},      // OpenAI, Anthropic (sk-ant-…) and look-alikes
	{"xoxb-", isAlnumDash, 10}, // Slack bot token
	{"xoxp-", isAlnumDash, 10}, // Slack user token
	{"xoxa-", isAlnumDash, 10}, // Slack app token
	{"hf_", isAlnum, 30},       // Hugging Face token
}

// triggers are the bytes findPatterns stops at.
var triggers = func() (t [256]bool) {
	for _, c := range []byte("bB:=KSJ-_") {
		t[c] = true
	}
	return t
}()

// apiKeyEnds has a bit for each pair of bytes an apiKeyShapes prefix ends with.
var apiKeyEnds = func() (bits [1 << 16 / 8]byte) {
	for _, k := range apiKeyShapes {
		n := len(k.prefix)
		pair := uint16(k.prefix[n-2])<<8 | uint16(k.prefix[n-1])
		bits[pair/8] |= 1 << (pair % 8)
	}
	return bits
}()

// apiKeyAt masks a whole vendor key, prefix included, whose prefix ends at i (its '_' or '-').
func apiKeyAt(s string, i int, spans []span) ([]span, int) {
	if i == 0 {
		return spans, i + 1
	}
	if pair := uint16(s[i-1])<<8 | uint16(s[i]); apiKeyEnds[pair/8]&(1<<(pair%8)) == 0 {
		return spans, i + 1
	}
	for _, k := range apiKeyShapes {
		n := len(k.prefix)
		st := i + 1 - n
		if st < 0 || s[i] != k.prefix[n-1] || s[i-1] != k.prefix[n-2] || s[st:i+1] != k.prefix || !wordStart(s, st) {
			continue
		}
		end := run(s, i+1, k.ok)
		if end-i-1 >= k.min {
			return append(spans, span{st, end, kAPIKey}), end
		}
	}
	return spans, i + 1
}

// authSchemes are the words before a credential in an Authorization value.
var authSchemes = [...]string{"bearer", "basic", "token", "digest", "bot", "negotiate"}

// keyValueAt masks the value of key=value, key: value, key := value, key => value and
// "key": "value" (also with escaped quotes inside a JSON string) when the key looks secret
// (LooksSecret); p is the index of the '=' or ':'. An unquoted value ends at white space or one
// of , ; & ) ] } < > \ and quotes; a quoted one at its closing quote. An Authorization scheme
// word ("Basic xyz") is kept and the credential after it masked. Objects, arrays and
// null/true/false are left alone. Scanning resumes after a masked value, which keeps the pass
// linear.
func keyValueAt(s string, p int, spans []span) ([]span, int) {
	sepEnd := p + 1
	if s[p] == ':' && strings.HasPrefix(s[p+1:], "=") || s[p] == '=' && strings.HasPrefix(s[p+1:], ">") {
		sepEnd++
	}
	// The key, right to left: blanks, an optional (escaped) quote, then key bytes.
	ke := p
	for ke > 0 && (s[ke-1] == ' ' || s[ke-1] == '\t') {
		ke--
	}
	if ke > 0 && (s[ke-1] == '"' || s[ke-1] == '\'') {
		ke--
		if ke > 0 && s[ke-1] == '\\' {
			ke--
		}
	}
	ks := ke
	for ks > 0 && ke-ks < 128 && isKeyByte(s[ks-1]) {
		ks--
	}
	if ks == ke || ks >= 3 && s[ks-3:ks] == "://" {
		return spans, p + 1 // no key, or the user in scheme://user:password@host
	}
	aws, ok := secretName(s[ks:ke])
	if !ok {
		return spans, p + 1
	}
	vs, ve, bearer := value(s, sepEnd)
	if vs == ve {
		return spans, p + 1
	}
	kind := kKeyValue
	if aws {
		kind = kAWS
	} else if bearer {
		kind = kBearer
	}
	return append(spans, span{vs, ve, kind}), ve
}

func isKeyByte(c byte) bool { return isAlnum(c) || c == '_' || c == '-' || c == '.' }

// value returns the range of the value that starts after blanks at i, or an empty range, and
// whether it followed the scheme word Bearer.
func value(s string, i int) (start, end int, bearer bool) {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
		i++
	}
	if i == len(s) {
		return i, i, false
	}
	var closing string
	switch {
	case s[i] == '"':
		closing, i = `"`, i+1
	case s[i] == '\'':
		closing, i = `'`, i+1
	case strings.HasPrefix(s[i:], `\"`):
		closing, i = `\"`, i+2
	case s[i] == '{' || s[i] == '[':
		return i, i, false
	}
	// Keep an Authorization scheme word: "Basic dXNlcjpw", "Bearer xyz".
	for _, w := range authSchemes {
		if len(s)-i > len(w)+1 && strings.EqualFold(s[i:i+len(w)], w) && s[i+len(w)] == ' ' {
			bearer = w == "bearer"
			i += len(w) + 1
			for i < len(s) && s[i] == ' ' {
				i++
			}
			break
		}
	}
	if closing != "" {
		end = closingQuote(s, i, closing)
	} else {
		end = i
		for end < len(s) && !endsUnquoted(s[end]) {
			end++
		}
	}
	v := s[i:end]
	if v == "" || strings.HasPrefix(v, maskPrefix) || v == "null" || v == "true" || v == "false" {
		return i, i, false
	}
	return i, end, bearer
}

// closingQuote returns the index of the closing quote of a value that starts at i, skipping
// backslash escapes, or the end of the line when there is none.
func closingQuote(s string, i int, q string) int {
	for j := i; j < len(s); j++ {
		switch {
		case strings.HasPrefix(s[j:], q):
			return j
		case s[j] == '\\' && q != `\"`:
			j++
		case s[j] == '\n':
			return j
		}
	}
	return len(s)
}

func endsUnquoted(c byte) bool {
	switch c {
	case ' ', '\t', '\r', '\n', '"', '\'', ',', ';', '&', ')', ']', '}', '<', '>', '\\':
		return true
	}
	return false
}
