package redact

// LooksSecret reports whether a variable, field or header name names a secret, ignoring case:
// names holding TOKEN, SECRET, PASSWORD, PASSWD, PASSPHRASE, PWD, API_KEY, APIKEY,
// PRIVATE_KEY, CREDENTIAL or AUTH (so GITHUB_TOKEN, AWS_SECRET_ACCESS_KEY, Authorization,
// x-api-key, clientSecret, DB_PASSWORD). Words that merely start alike are not secret:
// tokenizer, max_tokens, author, authority, passport, monkey, and PWD/OLDPWD, which are
// directories.
func LooksSecret(name string) bool {
	_, ok := secretName(name)
	return ok
}

// secretName is LooksSecret that also reports an AWS secret access key name.
func secretName(name string) (aws, ok bool) {
	var buf [128]byte
	var low []byte
	if len(name) <= len(buf) {
		low = buf[:len(name)]
	} else {
		low = make([]byte, len(name))
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		low[i] = c
	}
	for i := 0; i < len(low); i++ {
		rest := low[i:]
		switch low[i] {
		case 't':
			// token, tokens as a count (max_tokens) and tokenizer/tokenise are not secret.
			if hasPrefix(rest, "token") {
				after := rest[5:]
				if !hasPrefix(after, "iz") && !hasPrefix(after, "is") && !(hasPrefix(after, "s") && !letterAt(after, 1)) {
					ok = true
				}
			}
		case 'a':
			// auth, authorization, authorize; not author, authored, authority.
			if hasPrefix(rest, "auth") {
				after := rest[4:]
				if !hasPrefix(after, "or") || hasPrefix(after, "oriz") || hasPrefix(after, "oris") {
					ok = true
				}
			}
			if hasWords(rest, "api", "key") {
				ok = true
			}
		case 's':
			if hasPrefix(rest, "secret") {
				ok = true
				if i >= 4 && hasPrefix(low[i-4:], "aws") && hasWords(rest, "secret", "access", "key") {
					aws = true
				}
			}
		case 'p':
			if hasPrefix(rest, "passw") || hasPrefix(rest, "passphrase") || hasWords(rest, "private", "key") {
				ok = true
			}
			if hasPrefix(rest, "pwd") && string(low) != "pwd" && string(low) != "oldpwd" {
				ok = true
			}
		case 'c':
			if hasPrefix(rest, "credential") {
				ok = true
			}
		}
	}
	return aws, ok
}

func hasPrefix(b []byte, p string) bool { return len(b) >= len(p) && string(b[:len(p)]) == p }

func letterAt(b []byte, i int) bool { return i < len(b) && 'a' <= b[i] && b[i] <= 'z' }

// hasWords reports whether b starts with words joined by nothing or one of _ - . or space.
func hasWords(b []byte, words ...string) bool {
	for n, w := range words {
		if n > 0 && len(b) > 0 && (b[0] == '_' || b[0] == '-' || b[0] == '.' || b[0] == ' ') {
			b = b[1:]
		}
		if !hasPrefix(b, w) {
			return false
		}
		b = b[len(w):]
	}
	return true
}
