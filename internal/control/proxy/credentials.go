package proxy

import (
	"context"
	"net/http"
	"strings"
)

// What a user's server in a sandbox must never receive: any credential Cove itself accepts.
// A request to a user's port (not envd's) loses
//
//   - the X-API-Key, X-Access-Token and E2b-Traffic-Access-Token headers, whatever they hold;
//   - Authorization when it is a Bearer carrying a Cove credential: an API key ("e2b_…"),
//     an admin or other Cove token ("cove_…"), or the sandbox's own envd access token or
//     traffic token. Any other Authorization (the user's own Basic or Bearer) goes through;
//   - Cove's cookies (every one is named "cove_…", the console's session among them); the
//     user's other cookies go through.
//
// Signed /files URLs carry their signature in the query, but they are routed to envd only,
// never to a user's port.

// credentialHeaders always carry a Cove credential.
var credentialHeaders = []string{"X-API-Key", HeaderAccessToken, HeaderTrafficToken}

// coveTokenPrefixes start every token Cove makes that is not per sandbox: API keys (E2B's
// prefix) and the admin token.
var coveTokenPrefixes = []string{"e2b_", "cove_"}

// coveCookiePrefix starts the name of every cookie Cove sets.
const coveCookiePrefix = "cove_"

// sandboxTokens are sandbox id's own secrets: its envd access token and traffic token.
func (p *Proxy) sandboxTokens(ctx context.Context, id string) []string {
	var out []string
	if sb, err := p.cfg.Backend.Lookup(ctx, id); err == nil && sb.EnvdAccessToken != "" {
		out = append(out, sb.EnvdAccessToken)
	}
	if tok := p.cfg.Backend.TrafficToken(id); tok != "" {
		out = append(out, tok)
	}
	return out
}

// stripCredentials removes Cove's credentials from h, a request to a user's port; tokens
// are the sandbox's own.
func stripCredentials(h http.Header, tokens []string) {
	for _, name := range credentialHeaders {
		h.Del(name)
	}
	if auth := h.Values("Authorization"); len(auth) > 0 {
		kept := auth[:0:0]
		for _, v := range auth {
			if !isCoveAuthorization(v, tokens) {
				kept = append(kept, v)
			}
		}
		setValues(h, "Authorization", kept)
	}
	if cookies := h.Values("Cookie"); len(cookies) > 0 {
		var kept []string
		for _, line := range cookies {
			if v := withoutCoveCookies(line); v != "" {
				kept = append(kept, v)
			}
		}
		setValues(h, "Cookie", kept)
	}
}

func setValues(h http.Header, name string, values []string) {
	if len(values) == 0 {
		h.Del(name)
		return
	}
	h[http.CanonicalHeaderKey(name)] = values
}

// isCoveAuthorization says an Authorization value is a Bearer carrying a Cove credential.
func isCoveAuthorization(v string, tokens []string) bool {
	scheme, token, ok := strings.Cut(strings.TrimSpace(v), " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return false
	}
	token = strings.TrimSpace(token)
	for _, prefix := range coveTokenPrefixes {
		if strings.HasPrefix(token, prefix) {
			return true
		}
	}
	for _, t := range tokens {
		if token == t {
			return true
		}
	}
	return false
}

// withoutCoveCookies is a Cookie header line without Cove's cookies, the others kept as sent.
func withoutCoveCookies(line string) string {
	parts := strings.Split(line, ";")
	kept := parts[:0]
	for _, part := range parts {
		name, _, _ := strings.Cut(strings.TrimSpace(part), "=")
		if name == "" || strings.HasPrefix(name, coveCookiePrefix) {
			continue
		}
		kept = append(kept, strings.TrimSpace(part))
	}
	return strings.Join(kept, "; ")
}
