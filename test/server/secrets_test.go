package server

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/covetest"
)

// TestPlantedSecretsReachNoSink plants secrets Cove knows (an env var whose name looks
// secret, the creating API key, the envd access token) and secrets it only recognises by
// shape (a bearer token, URL credentials, a private key), makes the sandbox print, log, fail
// and die with them, and reads every place Cove writes: the server's log, envd's log file,
// the log store, the command records, the events and a webhook's bodies.
func TestPlantedSecretsReachNoSink(t *testing.T) {
	s := covetest.Start(t, "")
	a := client{t: t, url: s.URL, key: s.Key}
	var hookMu strings.Builder
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		hookMu.Write(b)
	}))
	t.Cleanup(hook.Close)
	if code, _, _ := a.do(http.MethodPost, "/events/webhooks", map[string]any{"url": hook.URL, "events": []string{"sandbox.lifecycle.created", "sandbox.lifecycle.killed"}}); code != http.StatusCreated {
		t.Fatalf("webhook: %d", code)
	}
	const envSecret = "env-secret-value-4242424242"
	const bearer = "Bearer abcDEF0123456789xyzTOKEN"
	const urlPass = "s3cr3tpassw0rd"
	code, created, _ := a.do(http.MethodPost, "/sandboxes", map[string]any{"templateID": "base", "secure": true,
		"envVars": map[string]string{"DB_PASSWORD": envSecret}, "metadata": map[string]string{"taskId": "secrets"}})
	if code != http.StatusCreated {
		t.Fatalf("create: %d %v", code, created)
	}
	id := created["sandboxID"].(string)
	token := created["envdAccessToken"].(string)
	script := `echo "pw=$DB_PASSWORD"; echo "curl -H 'Authorization: ` + bearer + `'"; ` +
		`echo "git clone https://bob:` + urlPass + `@git.example/x"; echo "key ` + s.Key + `"; ` +
		`echo "token ` + token + `" >&2; exit 9`
	runSecure(t, s, id, token, script, "req-secrets")
	time.Sleep(500 * time.Millisecond)
	if code, _, _ := a.do(http.MethodDelete, "/sandboxes/"+id, nil); code != http.StatusNoContent {
		t.Fatalf("kill: %d", code)
	}
	time.Sleep(time.Second) // deliveries and flushes

	// The server's log is its JSON lines; its stdout banner shows the first key once, on
	// purpose, to the operator who started it.
	sinks := collected(t, s, id)
	sinks["webhook bodies"] = hookMu.String()
	if !strings.Contains(sinks["log store"], "pw=[REDACTED") || !strings.Contains(sinks["command records"], "pw=[REDACTED") {
		t.Fatalf("the planted lines were not collected at all:\n%s", sinks["log store"])
	}
	for name, text := range sinks {
		for _, secret := range []string{envSecret, "abcDEF0123456789xyzTOKEN", urlPass, s.Key, token} {
			if strings.Contains(text, secret) {
				t.Errorf("%s contains the secret %q", name, secret)
			}
		}
	}
}

// collected is every text Cove keeps about sandbox id, by sink: the server's JSON log lines,
// the envd log file, the log store, the command records and the events.
func collected(t *testing.T, s *covetest.Server, id string) map[string]string {
	t.Helper()
	var jsonLines []string
	for _, l := range strings.Split(s.Logs(), "\n") {
		if strings.HasPrefix(l, "{") {
			jsonLines = append(jsonLines, l)
		}
	}
	sinks := map[string]string{"server log": strings.Join(jsonLines, "\n")}
	envdLog, _ := os.ReadFile(filepath.Join(s.DataDir, "logs", id+".log"))
	sinks["envd log file"] = string(envdLog)
	for name, path := range map[string]string{
		"log store":       "/v2/sandboxes/" + id + "/logs?limit=1000",
		"command records": "/sandboxes/" + id + "/commands",
		"events":          "/events/sandboxes/" + id,
		"info":            "/sandboxes/" + id,
	} {
		req, _ := http.NewRequest(http.MethodGet, s.URL+path, nil)
		req.Header.Set("X-API-Key", s.Key)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		sinks[name] = string(b)
	}
	return sinks
}
