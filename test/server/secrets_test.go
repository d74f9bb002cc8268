package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"

	"github.com/cove-dev/cove/internal/covetest"
	"github.com/cove-dev/cove/internal/observe/telemetry/otlptest"
	pb "github.com/cove-dev/cove/sdk/gen/process"
	"github.com/cove-dev/cove/sdk/gen/process/processconnect"
)

// TestPlantedSecretsReachNoSink plants secrets Cove knows (a sandbox-level env var whose
// name looks secret, a command-level one, a metadata value under a secret-looking key and
// one equal to the env secret, the creating API key, the envd access token) and secrets it
// only recognises by shape (a bearer token, URL credentials), makes the sandbox print, log,
// fail and die with them (one process is even named after a secret), and reads every place
// Cove writes: the whole data dir (database, WAL, envd's log files), the server's log, the
// log store, the command records, the events, the sandbox's info and list, a webhook's
// bodies, `cove trace`, `cove explain` and the OTLP export.
func TestPlantedSecretsReachNoSink(t *testing.T) {
	covetest.Skip(t)
	otlp := otlptest.Start(t)
	t.Setenv("COVE_OTEL_ENDPOINT", otlp.URL)
	s := covetest.StartWith(t, "", covetest.Options{OnStop: "kill", Args: []string{"--webhook-allow-net", "127.0.0.0/8"}}) // the receiver is on the loopback
	a := client{t: t, url: s.URL, key: s.Key}
	var hookMu sync.Mutex
	var hookBodies strings.Builder
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		hookMu.Lock()
		hookBodies.Write(b)
		hookMu.Unlock()
	}))
	t.Cleanup(hook.Close)
	hooked := func() string { hookMu.Lock(); defer hookMu.Unlock(); return hookBodies.String() }
	if code, _, _ := a.do(http.MethodPost, "/events/webhooks", map[string]any{"url": hook.URL, "events": []string{"sandbox.lifecycle.created", "sandbox.lifecycle.killed"}}); code != http.StatusCreated {
		t.Fatalf("webhook: %d", code)
	}
	const (
		envSecret = "env-secret-value-4242424242"
		cmdSecret = "cmd-secret-value-5353535353"
		mdSecret  = "md-secret-value-6464646464"
		bearer    = "Bearer abcDEF0123456789xyzTOKEN"
		urlPass   = "s3cr3tpassw0rd"
	)
	code, created, _ := a.do(http.MethodPost, "/sandboxes", map[string]any{"templateID": "base", "secure": true,
		"envVars":  map[string]string{"DB_PASSWORD": envSecret},
		"metadata": map[string]string{"taskId": "secrets", "apiToken": mdSecret, "copied": envSecret}})
	if code != http.StatusCreated {
		t.Fatalf("create: %d %v", code, created)
	}
	id := created["sandboxID"].(string)
	token := created["envdAccessToken"].(string)
	script := `echo "pw=$DB_PASSWORD"; echo "cmd=$DEPLOY_TOKEN"; echo "md=` + mdSecret + `"; ` +
		`echo "curl -H 'Authorization: ` + bearer + `'"; ` +
		`echo "git clone https://bob:` + urlPass + `@git.example/x"; echo "key ` + s.Key + `"; ` +
		`(exec -a "worker-$DEPLOY_TOKEN" sleep 600 &); ` +
		`echo "token ` + token + `" >&2; exit 9`
	runWithEnvs(t, s, id, token, script, "req-secrets", map[string]string{"DEPLOY_TOKEN": cmdSecret})
	logsBody := waitFor(t, func() (string, bool) {
		b := body(t, s, "/v2/sandboxes/"+id+"/logs?limit=1000")
		return b, strings.Contains(b, "pw=[REDACTED") && strings.Contains(b, "cmd=[REDACTED") && strings.Contains(b, "md=[REDACTED")
	})
	if code, _, _ := a.do(http.MethodDelete, "/sandboxes/"+id, nil, "X-E2B-Request-Id", "req-secrets-kill"); code != http.StatusNoContent {
		t.Fatalf("kill: %d", code)
	}
	waitFor(t, func() (string, bool) { b := hooked(); return b, strings.Contains(b, "sandbox.lifecycle.killed") })
	waitFor(t, func() (string, bool) {
		// The kill's log record in the OTLP export: the batch processors export every few seconds.
		recs := fmt.Sprint(otlp.Records())
		return recs, strings.Contains(recs, "req-secrets-kill")
	})

	// The server's log is its JSON lines; its stdout banner shows the first key once, on
	// purpose, to the operator who started it.
	var jsonLines []string
	for _, l := range strings.Split(s.Logs(), "\n") {
		if strings.HasPrefix(l, "{") {
			jsonLines = append(jsonLines, l)
		}
	}
	sinks := map[string]string{"server log": strings.Join(jsonLines, "\n"), "webhook bodies": hooked(), "log store": logsBody,
		"OTLP spans": fmt.Sprint(otlp.Spans()), "OTLP log records": fmt.Sprint(otlp.Records())}
	for name, path := range map[string]string{
		"command records": "/sandboxes/" + id + "/commands",
		"events":          "/events/sandboxes/" + id,
		"trace API":       "/traces/req-secrets",
		"sandbox list":    "/v2/sandboxes?state=running,paused,killed",
	} {
		sinks[name] = body(t, s, path)
	}
	sinks["cove trace"] = coveCLI(t, s, "trace", "req-secrets")
	sinks["cove explain"] = coveCLI(t, s, "explain", id)
	sinks["cove explain --json"] = coveCLI(t, s, "explain", "--json", id)
	for _, want := range []struct{ sink, text string }{
		{"command records", "pw=[REDACTED"}, {"cove explain", "worker-[REDACTED"}, {"cove trace", "cmd=[REDACTED"},
		{"events", `"apiToken":"[REDACTED:exact]"`}, {"webhook bodies", `"copied":"[REDACTED:exact]"`},
	} {
		if !strings.Contains(sinks[want.sink], want.text) {
			t.Errorf("%s lacks %q: the planted secret did not reach it at all, so the check below proves nothing:\n%s", want.sink, want.text, sinks[want.sink])
		}
	}
	for name, text := range sinks {
		for _, secret := range []string{envSecret, cmdSecret, mdSecret, "abcDEF0123456789xyzTOKEN", urlPass, s.Key, token} {
			if strings.Contains(text, secret) {
				t.Errorf("%s contains the secret %q", name, secret)
			}
		}
	}
	// Every file Cove keeps: the database and its WAL, envd's log files, the bundles. The
	// database holds the access token on purpose (the proxy checks it) and the key's hash.
	walkForSecrets(t, s.DataDir, envSecret, cmdSecret, mdSecret, urlPass)
}

// body GETs path with the server's key and returns the raw body.
func body(t *testing.T, s *covetest.Server, path string) string {
	t.Helper()
	var raw json.RawMessage
	getJSON(t, s, path, &raw)
	return string(raw)
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

// TestSecretsKnownOnlyAtCreateAreMaskedAfterARestart plants secrets a client gives only at
// create (a secret env var, a metadata value under a secret-looking key, the API key) and at
// a command's start (its secret env), crashes the server (SIGKILL) and starts it again on
// the data dir: the adopted sandbox's output, from a command started after the restart and
// from the one started before it, reaches the log store, the command records and the logs
// masked, and no file under the data dir holds a secret in the clear. The kill removes
// what was kept.
func TestSecretsKnownOnlyAtCreateAreMaskedAfterARestart(t *testing.T) {
	covetest.Skip(t)
	s := covetest.StartWith(t, "", covetest.Options{OnStop: "kill"})
	a := client{t: t, url: s.URL, key: s.Key}
	const (
		envSecret = "env-secret-after-restart-1212121212"
		cmdSecret = "cmd-secret-after-restart-3434343434"
		mdSecret  = "md-secret-after-restart-5656565656"
	)
	code, created, _ := a.do(http.MethodPost, "/sandboxes", map[string]any{"templateID": "base", "secure": true,
		"envVars":  map[string]string{"DB_PASSWORD": envSecret},
		"metadata": map[string]string{"taskId": "restart-secrets", "apiToken": mdSecret}})
	if code != http.StatusCreated {
		t.Fatalf("create: %d %v", code, created)
	}
	id := created["sandboxID"].(string)
	token := created["envdAccessToken"].(string)
	// A command started before the crash, whose secret env only that start told the server:
	// it prints once the sandbox is adopted.
	ctx, cancel := context.WithCancel(context.Background())
	c := processconnect.NewProcessClient(http.DefaultClient, s.URL)
	req := connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-c",
		`while [ ! -e /tmp/go ]; do sleep 0.1; done; echo "early cmd=$DEPLOY_TOKEN"`}, Envs: map[string]string{"DEPLOY_TOKEN": cmdSecret}}})
	req.Header().Set("E2b-Sandbox-Id", id)
	req.Header().Set("E2b-Sandbox-Port", "49983")
	req.Header().Set("X-Access-Token", token)
	stream, err := c.Start(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if !stream.Receive() {
		t.Fatalf("the early command did not start: %v", stream.Err())
	}
	cancel() // the command runs on without its stream
	waitFor(t, func() (string, bool) {
		b := body(t, s, "/sandboxes/"+id+"/commands")
		return b, strings.Contains(b, "/tmp/go")
	})

	s.Crash()
	s.Restart()
	a = client{t: t, url: s.URL, key: s.Key} // a new port
	runWithEnvs(t, s, id, token, `touch /tmp/go; echo "late pw=$DB_PASSWORD"; echo "late md=`+mdSecret+`"; echo "late key `+s.Key+`"`, "req-after-restart", nil)
	logsBody := waitFor(t, func() (string, bool) {
		b := body(t, s, "/v2/sandboxes/"+id+"/logs?limit=1000")
		return b, strings.Contains(b, "late pw=") && strings.Contains(b, "late md=") &&
			strings.Contains(b, "late key ") && strings.Contains(b, "early cmd=")
	})
	for _, want := range []string{"late pw=[REDACTED", "late md=[REDACTED", "late key [REDACTED", "early cmd=[REDACTED"} {
		if !strings.Contains(logsBody, want) {
			t.Errorf("the log store lacks %q after the restart", want)
		}
	}
	sinks := collected(t, s, id)
	sinks["log store"] = logsBody
	for name, text := range sinks {
		for _, secret := range []string{envSecret, cmdSecret, mdSecret, s.Key} {
			if strings.Contains(text, secret) {
				t.Errorf("%s contains the secret %q after the restart", name, secret)
			}
		}
	}
	walkForSecrets(t, s.DataDir, envSecret, cmdSecret, mdSecret)
	if code, _, _ := a.do(http.MethodDelete, "/sandboxes/"+id, nil); code != http.StatusNoContent {
		t.Fatalf("kill: %d", code)
	}
	if _, err := os.Stat(filepath.Join(s.DataDir, "vault", id)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the killed sandbox's kept secrets are still on disk: %v", err)
	}
}

// walkForSecrets fails t for every file under dir that holds one of secrets in the clear.
func walkForSecrets(t *testing.T, dir string, secrets ...string) {
	t.Helper()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil
		}
		for _, secret := range secrets {
			if strings.Contains(string(b), secret) {
				t.Errorf("%s contains the secret %q", path, secret)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
