package redact

// Value returns v, a value decoded from JSON (string, float64, bool, nil, map[string]any or
// []any), with secrets masked in place and what was masked, key being the name it was found
// under ("" for none). Strings are redacted as String does; and every string or number under
// a key that looks secret (LooksSecret, such as "token" or "password"), at any depth, is
// masked whole as a key_value: a parsed {"token": "abc"} keeps no more than its text would.
func (r *Redactor) Value(key string, v any) (any, Counts) {
	var c Counts
	return r.value(v, key != "" && LooksSecret(key), &c), c
}

func (r *Redactor) value(v any, secret bool, c *Counts) any {
	switch t := v.(type) {
	case string:
		if secret && t != "" && t != masks[kKeyValue] {
			c.inc(kKeyValue)
			return masks[kKeyValue]
		}
		s, n := r.String(t)
		c.Add(n)
		return s
	case float64, int, int64:
		if secret {
			c.inc(kKeyValue)
			return masks[kKeyValue]
		}
	case map[string]any:
		for k, x := range t {
			t[k] = r.value(x, secret || LooksSecret(k), c)
		}
	case []any:
		for i, x := range t {
			t[i] = r.value(x, secret, c)
		}
	}
	return v
}
