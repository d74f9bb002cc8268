package redteam

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	cove "github.com/cove-dev/cove/sdk"
)

// serverError is an answer the floor never accepts: no answer at all (a panic drops the
// connection) or a 5xx other than 501 (operations this server does not serve) and 507 (a
// store that is full).
func serverError(code int) bool {
	return code == 0 || (code >= 500 && code != http.StatusNotImplemented && code != http.StatusInsufficientStorage)
}

// TestFloorMalformedRequests sends a few hundred malformed REST requests (bad JSON, wrong
// types, huge values, unknown fields, path traversal in ids, bad methods) as an
// authenticated caller: none may panic the server or get a server error.
func TestFloorMalformedRequests(t *testing.T) {
	need(t)
	defer report(t, classMalformed)
	// A live sandbox of the caller: bodies to its routes reach the handlers past the lookup.
	sb := sandbox(t, env.keyA, cove.SandboxOptions{Timeout: 5 * time.Minute})
	bodies := map[string]string{
		"truncated JSON":        `{"templateID":`,
		"an array":              `[]`,
		"null":                  `null`,
		"a string":              `"base"`,
		"a number":              `12345`,
		"wrong type":            `{"templateID": 5, "timeout": "soon", "name": {}, "sizeMB": "big", "steps": "x"}`,
		"huge number":           `{"timeout": 1e308, "sizeMB": 99999999999999999999999, "cpuCount": 1e30, "memoryMB": -1e30}`,
		"negative values":       `{"timeout": -1, "sizeMB": -5, "cpuCount": -2, "memoryMB": -3}`,
		"unknown fields":        `{"frobnicate": true, "__proto__": {"admin": true}, "templateID": "base"}`,
		"deep nesting":          strings.Repeat("[", 100000) + strings.Repeat("]", 100000),
		"invalid UTF-8":         "{\"name\": \"\xff\xfe\xfd\", \"templateID\": \"\xc3\x28\"}",
		"NUL in strings":        "{\"name\": \"a\\u0000b\", \"templateID\": \"base\\u0000\"}",
		"a long name":           `{"name": "` + strings.Repeat("n", 200000) + `", "templateID": "` + strings.Repeat("t", 5000) + `"}`,
		"traversal in names":    `{"name": "../../../etc/passwd", "templateID": "../../base", "fromTemplate": "../layers"}`,
		"bad network rules":     `{"network": {"allowOut": ["not-an-address", "999.1.1.1/40"], "denyOut": [5], "rules": {"": [{"transform": {"headers": {"": ""}}}]}}}`,
		"bad mounts":            `{"volumeMounts": [{"name": "", "path": "relative"}, {"name": "../x", "path": "/proc"}]}`,
		"bad steps":             `{"fromTemplate": "base", "steps": [{"type": "RUN", "args": null}, {"type": "COPY", "args": ["/etc/shadow"]}, {"type": ""}]}`,
		"bad image":             `{"fromImage": "::::", "fromImageRegistry": {"type": "gcp", "username": 5}}`,
		"huge env":              `{"templateID": "base", "envVars": {"` + strings.Repeat("K", 70000) + `": "v"}, "metadata": {"k": "` + strings.Repeat("v", 70000) + `"}}`,
		"a body over the limit": `{"name": "` + strings.Repeat("x", 3<<20) + `"}`,
		"empty body":            ``,
		"tags of wrong shape":   `{"target": 5, "tags": "latest", "names": [null]}`,
		"secret of wrong shape": `{"name": null, "value": ["x"], "metadata": "m"}`,
		"duplicate keys":        `{"templateID": "base", "templateID": "../x", "timeout": 1, "timeout": -1}`,
		"a very long number":    `{"timeout": ` + strings.Repeat("9", 10000) + `}`,
	}
	sid := url.PathEscape(sb.ID)
	bodyRoutes := []string{
		"POST /sandboxes", "POST /v2/sandboxes", "POST /sandboxes/" + sid + "/timeout", "POST /sandboxes/" + sid + "/refreshes",
		"POST /sandboxes/" + sid + "/connect", "POST /v2/sandboxes/" + sid + "/connect", "PUT /sandboxes/" + sid + "/network",
		"POST /v3/templates", "POST /v2/templates/rt-nope/builds/rt-nope", "PATCH /templates/rt-nope", "PATCH /v2/templates/rt-nope",
		"POST /templates/tags", "DELETE /templates/tags", "POST /volumes", "POST /secrets", "POST /secrets/rt-nope",
		"POST /sandboxes/rt-nope/fork", "POST /sandboxes/rt-nope/snapshots", "POST /sandboxes/rt-nope/pause", "POST /sandboxes/rt-nope/resume",
	}
	type req struct{ method, path, body, ctype string }
	var reqs []req
	for _, route := range bodyRoutes {
		method, path, _ := strings.Cut(route, " ")
		for _, name := range sortedKeys(bodies) {
			reqs = append(reqs, req{method, path, bodies[name], "application/json"})
		}
		reqs = append(reqs, req{method, path, `{"templateID":"base"}`, "text/plain"}, req{method, path, "a=b&c=d", "application/x-www-form-urlencoded"})
	}
	ids := []string{"..", "../..", "..%2f..%2fetc%2fpasswd", "%2e%2e%2f%2e%2e", "%00", "a%00b", strings.Repeat("i", 5000),
		"sbx'%20OR%201=1--", "%ff%fe", "..%5c..%5cwindows", "%2fetc%2fpasswd", "~root", "*", "%25%32%65", "base%2f..%2f..%2f"}
	idRoutes := []string{
		"GET /sandboxes/%s", "DELETE /sandboxes/%s", "POST /sandboxes/%s/timeout", "POST /sandboxes/%s/pause", "POST /sandboxes/%s/resume",
		"GET /templates/%s", "DELETE /templates/%s", "GET /templates/%s/builds/%s/status", "GET /templates/%s/builds/%s/logs",
		"GET /templates/%s/files/%s", "GET /volumes/%s", "DELETE /volumes/%s", "DELETE /snapshots/%s", "GET /secrets/%s",
		"DELETE /secrets/%s", "GET /teams/%s/metrics", "GET /teams/%s/metrics/max", "GET /volumecontent/%s/dir", "GET /volumecontent/%s/file",
		"GET /sandboxes/%s/logs", "GET /sandboxes/%s/metrics",
	}
	for _, route := range idRoutes {
		method, pattern, _ := strings.Cut(route, " ")
		for _, id := range ids {
			path := strings.ReplaceAll(pattern, "%s", id)
			reqs = append(reqs, req{method, path, `{"timeout": 1}`, "application/json"})
		}
	}
	queries := []string{"?limit=-1", "?limit=99999999999999999999", "?nextToken=%ff%00", "?state=bogus&metadata=%zz", "?metadata=" + strings.Repeat("a%3Db%26", 2000),
		"?start=yesterday&end=-1", "?sandboxID=../../x", "?path=../../../../etc/passwd", "?offset=-5&limit=abc"}
	for _, path := range []string{"/v2/sandboxes", "/sandboxes", "/templates", "/v2/templates", "/volumes", "/snapshots", "/secrets",
		"/sandboxes/" + sid + "/logs", "/sandboxes/" + sid + "/metrics", "/teams/" + env.teamA + "/metrics", "/teams/" + env.teamA + "/metrics/max"} {
		for _, q := range queries {
			reqs = append(reqs, req{http.MethodGet, path + q, "", ""})
		}
	}
	for _, method := range []string{"PROPFIND", "TRACE", "PATCH", "PUT", "CONNECT", "FOO", "OPTIONS", "HEAD"} {
		for _, path := range []string{"/sandboxes", "/v2/sandboxes", "/templates", "/volumes", "/teams", "/sandboxes/" + sid, "/snapshots", "/health"} {
			reqs = append(reqs, req{method, path, `{}`, "application/json"})
		}
	}
	for _, r := range reqs {
		h := http.Header{}
		if r.ctype != "" {
			h.Set("Content-Type", r.ctype)
		}
		var body any
		if r.body != "" {
			body = r.body
		}
		code, text := callHeaders(env.keyA, r.method, r.path, body, nil, h)
		name := fmt.Sprintf("%s %.80s (%.40q)", r.method, r.path, r.body)
		probe(t, classMalformed, name, !serverError(code), fmt.Sprintf("answered %d %.200s", code, text))
	}
	// Keys that are not keys, on the same footing.
	for _, key := range []string{strings.Repeat("e2b_", 20000), "e2b_' OR '1'='1", "../../admin-token"} {
		code, text := call(key, http.MethodGet, "/v2/sandboxes", nil, nil)
		probe(t, classMalformed, fmt.Sprintf("a key of %d bytes", len(key)), code == http.StatusUnauthorized || (code >= 400 && code < 500), fmt.Sprintf("answered %d %.200s", code, text))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	probe(t, classMalformed, "the server still answers", client(env.keyA).Health(ctx) == nil, "health failed after the malformed requests")
	log, _ := os.ReadFile(env.server.LogPath)
	probe(t, classMalformed, "the server's log holds no panic", !strings.Contains(string(log), "panic"), "the server's log mentions a panic")
	if out, code := sh(t, sb, "echo alive", time.Minute); code != 0 || !strings.Contains(out, "alive") {
		t.Logf("the fuzz target sandbox did not answer afterwards (a malformed body may have ended it): %d %s", code, out)
	}
}
