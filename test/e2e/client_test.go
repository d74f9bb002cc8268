package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/cove-dev/cove/sdk/gen/process"
	"github.com/cove-dev/cove/sdk/gen/process/processconnect"
)

// sandbox is what create answers, plus how to reach its envd.
type sandbox struct {
	ID          string `json:"sandboxID"`
	TemplateID  string `json:"templateID"`
	EnvdVersion string `json:"envdVersion"`
	AccessToken string `json:"envdAccessToken"`
}

// detail is GET /sandboxes/{id}'s answer, the fields the tests read.
type detail struct {
	ID       string            `json:"sandboxID"`
	State    string            `json:"state"`
	MemoryMB int               `json:"memoryMB"`
	Metadata map[string]string `json:"metadata"`
}

var restClient = &http.Client{Timeout: 2 * time.Minute}

// call sends a REST request with the API key and returns the status and body.
func call(t testing.TB, method, path string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, server.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-API-Key", server.APIKey)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := restClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return resp.StatusCode, b
}

// mustCall is call that fails t unless the status is want, decoding the body into out.
func mustCall(t testing.TB, method, path string, body any, want int, out any) {
	t.Helper()
	status, b := call(t, method, path, body)
	if status != want {
		t.Fatalf("%s %s: status %d, want %d: %s", method, path, status, want, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: decode %s: %v", method, path, b, err)
		}
	}
}

// create makes a sandbox from the base template with body's extra fields, and kills it
// when the test ends.
func create(t testing.TB, body map[string]any) *sandbox {
	t.Helper()
	if body == nil {
		body = map[string]any{}
	}
	if _, ok := body["templateID"]; !ok {
		body["templateID"] = "base"
	}
	if _, ok := body["timeout"]; !ok {
		body["timeout"] = 300
	}
	var sb sandbox
	mustCall(t, http.MethodPost, "/sandboxes", body, http.StatusCreated, &sb)
	t.Cleanup(func() { call(t, http.MethodDelete, "/sandboxes/"+sb.ID, nil) })
	return &sb
}

func (sb *sandbox) info(t testing.TB) detail {
	t.Helper()
	var d detail
	mustCall(t, http.MethodGet, "/sandboxes/"+sb.ID, nil, http.StatusOK, &d)
	return d
}

func (sb *sandbox) pause(t testing.TB) {
	t.Helper()
	mustCall(t, http.MethodPost, "/sandboxes/"+sb.ID+"/pause", map[string]any{}, http.StatusNoContent, nil)
}

// connect resumes a paused sandbox (201) the way the SDK's Sandbox.connect does.
func (sb *sandbox) connect(t testing.TB, want int) {
	t.Helper()
	mustCall(t, http.MethodPost, "/sandboxes/"+sb.ID+"/connect", map[string]any{"timeout": 300}, want, nil)
}

// envdTransport addresses every request to one sandbox's envd through the proxy.
type envdTransport struct {
	sb    *sandbox
	token string // X-Access-Token; "" sends none
	user  string // Authorization: Basic user:
}

func (e *envdTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("E2b-Sandbox-Id", e.sb.ID)
	r.Header.Set("E2b-Sandbox-Port", "49983")
	if e.token != "" {
		r.Header.Set("X-Access-Token", e.token)
	}
	if e.user != "" {
		r.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(e.user+":")))
	}
	return http.DefaultTransport.RoundTrip(r)
}

// envd is a sandbox's envd reached through the server's proxy.
type envd struct {
	http *http.Client
	proc processconnect.ProcessClient
}

// envdOf returns sb's envd as root, carrying the access token when sb has one.
func envdOf(sb *sandbox) *envd {
	return envdWith(sb, sb.AccessToken)
}

func envdWith(sb *sandbox, token string) *envd {
	hc := &http.Client{Transport: &envdTransport{sb: sb, token: token, user: "root"}}
	return &envd{http: hc, proc: processconnect.NewProcessClient(hc, server.URL)}
}

// result is how a command ended.
type result struct {
	pid            uint32
	stdout, stderr string
	end            *process.ProcessEvent_EndEvent // nil: the stream ended without one
}

func (r result) String() string {
	if r.end == nil {
		return fmt.Sprintf("no end event; stdout %q stderr %q", r.stdout, r.stderr)
	}
	return fmt.Sprintf("exit %d exited=%v status %q error %q; stdout %q stderr %q",
		r.end.GetExitCode(), r.end.GetExited(), r.end.GetStatus(), r.end.GetError(), r.stdout, r.stderr)
}

// startCmd starts `bash -l -c script` the way commands.run does.
func (e *envd) startCmd(ctx context.Context, script string) (*connect.ServerStreamForClient[process.StartResponse], error) {
	stdin := false
	return e.proc.Start(ctx, connect.NewRequest(&process.StartRequest{
		Process: &process.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", script}},
		Stdin:   &stdin,
	}))
}

// collect reads a Start stream to its end; onStart sees the pid at once.
func collect(stream *connect.ServerStreamForClient[process.StartResponse], onStart func(pid uint32)) (result, error) {
	var res result
	var out, errb strings.Builder
	defer stream.Close()
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		switch {
		case ev.GetStart() != nil:
			res.pid = ev.GetStart().GetPid()
			if onStart != nil {
				onStart(res.pid)
			}
		case ev.GetData() != nil:
			out.Write(ev.GetData().GetStdout())
			errb.Write(ev.GetData().GetStderr())
		case ev.GetEnd() != nil:
			res.end = ev.GetEnd()
		}
	}
	res.stdout, res.stderr = out.String(), errb.String()
	if err := stream.Err(); err != nil {
		return res, err
	}
	if res.end == nil {
		return res, errors.New("stream ended without an end event")
	}
	return res, nil
}

// run runs script to its end.
func (e *envd) run(ctx context.Context, script string) (result, error) {
	stream, err := e.startCmd(ctx, script)
	if err != nil {
		return result{}, err
	}
	return collect(stream, nil)
}

// mustRun runs script and fails t unless it exits 0; it returns stdout.
func (e *envd) mustRun(t testing.TB, script string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := e.run(ctx, script)
	if err != nil {
		t.Fatalf("run %q: %v (%s)", script, err, res)
	}
	if res.end.GetExitCode() != 0 || !res.end.GetExited() {
		t.Fatalf("run %q: %s", script, res)
	}
	return res.stdout
}

// health is GET /health through the proxy: 204 running, 502 paused or gone.
func (e *envd) health(t testing.TB) int {
	t.Helper()
	resp, err := e.http.Get(server.URL + "/health")
	if err != nil {
		t.Fatalf("GET /health: %v", err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
