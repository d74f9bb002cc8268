package redteam

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	cove "github.com/cove-dev/cove/sdk"
)

const classEnvd = "floor: envd requests and tokens"

// TestFloorEnvd sends envd, through Cove's proxy, malformed requests with a sandbox's valid
// access token (none may get a server error) and requests with no, a wrong or another
// credential, and signed URLs tampered with (all must be refused).
func TestFloorEnvd(t *testing.T) {
	need(t)
	defer report(t, classEnvd)
	var created cove.CreatedSandbox
	if code, body := call(env.keyA, http.MethodPost, "/sandboxes", map[string]any{"templateID": "base", "timeout": 300, "secure": true}, &created); code != http.StatusCreated || created.SandboxID == "" {
		t.Fatalf("create: %d %s", code, body)
	}
	t.Cleanup(func() { call(env.keyA, http.MethodDelete, "/sandboxes/"+created.SandboxID, nil, nil) })
	id, token := created.SandboxID, created.EnvdAccessToken
	envd := func(method, path, ctype, body string, auth http.Header) (int, string) {
		h := http.Header{"E2b-Sandbox-Id": {id}}
		if ctype != "" {
			h.Set("Content-Type", ctype)
		}
		for k, v := range auth {
			h[k] = v
		}
		var in any
		if body != "" {
			in = body
		}
		return callHeaders("", method, path, in, nil, h)
	}
	withToken := http.Header{"X-Access-Token": {token}}

	// The credentials.
	denied := func(code int) bool { return code == http.StatusUnauthorized || code == http.StatusForbidden }
	creds := map[string]http.Header{
		"no access token":               nil,
		"a wrong access token":          {"X-Access-Token": {strings.Repeat("0", len(token))}},
		"team A's API key as the token": {"X-Access-Token": {env.keyA}},
		"team A's API key in X-API-Key": {"X-API-Key": {env.keyA}},
		"the token as a bearer":         {"Authorization": {"Bearer " + strings.Repeat("1", len(token))}},
		"an empty access token":         {"X-Access-Token": {""}},
		"the token with a byte flipped": {"X-Access-Token": {token[:len(token)-1] + string(rune('a'+(token[len(token)-1]+1)%26))}},
	}
	for _, name := range sortedKeys(creds) {
		for _, r := range []struct{ method, path, ctype, body string }{
			{"GET", "/files?path=/etc/hostname", "", ""},
			{"POST", "/process.Process/List", "application/json", "{}"},
			{"POST", "/init", "application/json", `{"accessToken": "rt-taken-over", "envVars": {"RT": "1"}}`},
			{"GET", "/envs", "", ""},
		} {
			code, body := envd(r.method, r.path, r.ctype, r.body, creds[name])
			probe(t, classEnvd, fmt.Sprintf("%s: %s %s", name, r.method, r.path), denied(code), fmt.Sprintf("answered %d %.150s", code, body))
		}
	}
	// Signed URLs.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sb, err := client(env.keyA).Connect(ctx, id, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	signed, err := sb.DownloadURL("/etc/hostname", cove.SignatureExpiration(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	get := func(raw string) (int, string) {
		res, err := httpClient.Get(raw)
		if err != nil {
			return 0, err.Error()
		}
		defer res.Body.Close()
		return res.StatusCode, res.Status
	}
	if code, status := get(signed); code != http.StatusOK {
		t.Fatalf("control: the signed URL itself answered %s", status)
	}
	tamper := map[string]func(q url.Values){
		"another path":              func(q url.Values) { q.Set("path", "/etc/passwd") },
		"a later expiration":        func(q url.Values) { q.Set("signature_expiration", fmt.Sprint(time.Now().Add(24*time.Hour).Unix())) },
		"an expiration in the past": func(q url.Values) { q.Set("signature_expiration", fmt.Sprint(time.Now().Add(-time.Hour).Unix())) },
		"another user":              func(q url.Values) { q.Set("username", "root") },
		"no signature":              func(q url.Values) { q.Del("signature") },
		"a signature of zeros":      func(q url.Values) { q.Set("signature", "v1_"+strings.Repeat("0", 64)) },
	}
	for _, name := range sortedKeys(tamper) {
		u, _ := url.Parse(signed)
		q := u.Query()
		tamper[name](q)
		u.RawQuery = q.Encode()
		code, status := get(u.String())
		probe(t, classEnvd, "a signed URL with "+name, code >= 400 && code < 500, "answered "+status)
	}

	// Malformed requests with the valid token (the owner's: they may do anything in the
	// sandbox, so none of them names a file the sandbox needs).
	var reqs []struct{ method, path, ctype, body string }
	add := func(method, path, ctype, body string) {
		reqs = append(reqs, struct{ method, path, ctype, body string }{method, path, ctype, body})
	}
	for _, p := range []string{"", "/nonexistent/rt", "../../../../etc/hostname", "/etc/shadow", "%00", "/tmp/" + strings.Repeat("x", 5000),
		"/proc/self/status", "/", "/root", "relative/path", "~/x", "/tmp/%ff%fe"} {
		add("GET", "/files?path="+p, "", "")
		add("POST", "/files?path="+p, "multipart/form-data; boundary=rt", "--rt\r\nContent-Disposition: form-data; name=\"file\"; filename=\"x\"\r\n\r\nrt\r\n--rt--\r\n")
		add("POST", "/files?path="+p, "multipart/form-data; boundary=", "garbage")
		add("POST", "/files?path="+p, "application/octet-stream", "raw")
	}
	add("GET", "/files?path=/etc/hostname&username=nobody-rt", "", "")
	add("GET", "/files?path=/etc/hostname&username="+strings.Repeat("u", 3000), "", "")
	rpcs := []string{"/process.Process/Start", "/process.Process/List", "/process.Process/Connect", "/process.Process/SendInput",
		"/process.Process/SendSignal", "/process.Process/Update", "/process.Process/StreamInput", "/filesystem.Filesystem/Stat",
		"/filesystem.Filesystem/ListDir", "/filesystem.Filesystem/MakeDir", "/filesystem.Filesystem/Move", "/filesystem.Filesystem/Remove",
		"/filesystem.Filesystem/WatchDir", "/filesystem.Filesystem/CreateWatcher", "/process.Process/Nope"}
	for _, rpc := range rpcs {
		for _, b := range []string{`{`, `[]`, `{"process": {"cmd": 5}}`, `{"path": {"x": 1}, "depth": -1}`, `{"pid": "x", "signal": 99999}`,
			`{"selector": {"pid": 4294967295}}`, `{"path": "../../../../tmp/rt-none", "source": "/tmp/rt-none", "destination": "../../../tmp/rt-moved"}`, "\xff\xfe"} {
			add("POST", rpc, "application/json", b)
		}
		add("POST", rpc, "application/proto", "\x0a\xff\xff\xff\xff\x0f")
		add("POST", rpc, "application/connect+json", "\x00\x00\x00\x00\x05{bad}")
		add("GET", rpc, "", "")
	}
	add("POST", "/init", "application/json", `{`)
	add("POST", "/init", "application/json", `{"envVars": 5, "timestamp": "never"}`)
	add("GET", "/metrics?x="+strings.Repeat("y", 4000), "", "")
	add("PROPFIND", "/files", "", "")
	add("DELETE", "/health", "", "")
	for _, r := range reqs {
		code, body := envd(r.method, r.path, r.ctype, r.body, withToken)
		probe(t, classEnvd, fmt.Sprintf("%s %.80s (%.30q)", r.method, r.path, r.body), !serverError(code), fmt.Sprintf("answered %d %.150s", code, body))
	}
	if out, code := sh(t, sb, "echo alive", time.Minute); code != 0 || !strings.Contains(out, "alive") {
		probe(t, classEnvd, "envd still answers", false, fmt.Sprintf("%d %s", code, out))
	} else {
		probe(t, classEnvd, "envd still answers", true, "")
	}
}
