package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/cove-dev/cove/internal/covetest"
	pb "github.com/cove-dev/cove/sdk/gen/process"
	"github.com/cove-dev/cove/sdk/gen/process/processconnect"
)

// run runs a bash script in a sandbox through the proxy with a chosen request id.
func run(t *testing.T, s *covetest.Server, id, script, requestID string) {
	t.Helper()
	runSecure(t, s, id, "", script, requestID)
}

// runSecure is run for a sandbox created secure, with its envd access token.
func runSecure(t *testing.T, s *covetest.Server, id, token, script, requestID string) {
	t.Helper()
	runWithEnvs(t, s, id, token, script, requestID, nil)
}

// runWithEnvs is runSecure with the command's own envs.
func runWithEnvs(t *testing.T, s *covetest.Server, id, token, script, requestID string, envs map[string]string) {
	t.Helper()
	c := processconnect.NewProcessClient(http.DefaultClient, s.URL)
	f := false
	req := connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-c", script}, Envs: envs}, Stdin: &f})
	req.Header().Set("E2b-Sandbox-Id", id)
	req.Header().Set("E2b-Sandbox-Port", "49983")
	req.Header().Set("X-E2B-Request-Id", requestID)
	if token != "" {
		req.Header().Set("X-Access-Token", token)
	}
	stream, err := c.Start(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	for stream.Receive() {
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("run %q: %v", script, err)
	}
}

func getJSON(t *testing.T, s *covetest.Server, path string, v any) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, s.URL+path, nil)
	req.Header.Set("X-API-Key", s.Key)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if err := json.Unmarshal(b, v); err != nil && res.StatusCode == http.StatusOK {
		t.Fatalf("GET %s: %v in %s", path, err, b)
	}
	return res.StatusCode
}

func TestLogsAndCommandRecords(t *testing.T) {
	s := covetest.Start(t, "")
	a := client{t: t, url: s.URL, key: s.Key}
	const secret = "planted-secret-0123456789"
	id := a.create(map[string]any{"metadata": map[string]string{"taskId": "task-logs"}, "envVars": map[string]string{"API_TOKEN": secret}})
	run(t, s, id, `echo hello-from-task; echo "token=$API_TOKEN"; echo '{"level":"error","msg":"json-line","n":7}' >&2; exit 3`, "req-logs-1")

	type wire struct {
		Logs []struct {
			Timestamp string         `json:"timestamp"`
			Message   string         `json:"message"`
			Level     string         `json:"level"`
			Fields    map[string]any `json:"fields"`
		} `json:"logs"`
	}
	var page wire
	deadline := time.Now().Add(10 * time.Second)
	for {
		getJSON(t, s, "/v2/sandboxes/"+id+"/logs?fields.taskId=task-logs&request_id=req-logs-1&limit=100", &page)
		if len(page.Logs) >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("logs after 10 s: %+v", page)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Run("a command's lines are stored with the task id, pid, stream and request id", func(t *testing.T) {
		found := false
		for _, l := range page.Logs {
			if l.Message == "hello-from-task" {
				found = true
				if l.Fields["taskId"] != "task-logs" || l.Fields["sandbox.id"] != id {
					t.Errorf("line fields %v", l.Fields)
				}
			}
		}
		if !found {
			t.Errorf("hello-from-task not in %+v", page.Logs)
		}
	})
	t.Run("a JSON line keeps its level and fields", func(t *testing.T) {
		var p wire
		getJSON(t, s, "/v2/sandboxes/"+id+"/logs?search="+url.QueryEscape("json-line")+"&level=error", &p)
		// E2B's log fields are strings: a JSON number comes back as its text.
		if len(p.Logs) != 1 || p.Logs[0].Level != "error" || fmt.Sprint(p.Logs[0].Fields["n"]) != "7" {
			t.Errorf("search json-line at error: %+v", p.Logs)
		}
	})
	t.Run("the planted secret is in no stored line", func(t *testing.T) {
		var all wire
		getJSON(t, s, "/v2/sandboxes/"+id+"/logs?limit=1000", &all)
		b, _ := json.Marshal(all)
		if strings.Contains(string(b), secret) {
			t.Errorf("secret stored in logs: %s", b)
		}
		if !strings.Contains(string(b), "token=[REDACTED") {
			t.Errorf("the secret's line is missing or unmasked: %s", b)
		}
	})
	t.Run("the command record has its exit code, output head and request id, redacted", func(t *testing.T) {
		var cmds struct {
			Commands []map[string]any `json:"commands"`
		}
		var list []map[string]any
		code := getJSON(t, s, "/sandboxes/"+id+"/commands", &cmds)
		list = cmds.Commands
		if code != http.StatusOK || len(list) == 0 {
			var bare []map[string]any
			getJSON(t, s, "/sandboxes/"+id+"/commands", &bare)
			list = bare
		}
		var rec map[string]any
		for _, c := range list {
			if c["requestId"] == "req-logs-1" {
				rec = c
			}
		}
		if rec == nil {
			t.Fatalf("no record for req-logs-1 in %v", list)
		}
		head, _ := rec["stdoutHead"].(string)
		if rec["exitCode"] != float64(3) || rec["endCause"] != "exited" || !strings.Contains(head, "hello-from-task") || strings.Contains(head, secret) {
			t.Errorf("record %v", rec)
		}
	})
	t.Run("a command running when its sandbox is killed ends as sandbox_killed with the reason", func(t *testing.T) {
		go func() { // the stream fails when the sandbox dies under it: that is the point
			c := processconnect.NewProcessClient(http.DefaultClient, s.URL)
			req := connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/sleep", Args: []string{"60"}}})
			req.Header().Set("E2b-Sandbox-Id", id)
			req.Header().Set("X-E2B-Request-Id", "req-logs-sleep")
			if stream, err := c.Start(context.Background(), req); err == nil {
				for stream.Receive() {
				}
			}
		}()
		time.Sleep(500 * time.Millisecond)
		if code, _, _ := a.do(http.MethodDelete, "/sandboxes/"+id, nil); code != http.StatusNoContent {
			t.Fatalf("kill: %d", code)
		}
		deadline := time.Now().Add(5 * time.Second)
		for {
			var cmds struct {
				Commands []map[string]any `json:"commands"`
			}
			getJSON(t, s, "/sandboxes/"+id+"/commands", &cmds)
			for _, c := range cmds.Commands {
				if c["requestId"] == "req-logs-sleep" && c["endCause"] == "sandbox_killed" && c["killReason"] == "request" {
					return
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("no sandbox_killed record: %v", cmds.Commands)
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
}

func TestKilledEventKeepsAPostmortem(t *testing.T) {
	s := covetest.Start(t, "")
	a := client{t: t, url: s.URL, key: s.Key}
	id := a.create(nil)
	go func() { // holds 200 MB until the kill; its stream ends with the sandbox
		c := processconnect.NewProcessClient(http.DefaultClient, s.URL)
		req := connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/usr/bin/python3", Args: []string{"-c",
			"b = bytearray(200 << 20); print('holding memory', flush=True); import time; time.sleep(60)"}}})
		req.Header().Set("E2b-Sandbox-Id", id)
		if stream, err := c.Start(context.Background(), req); err == nil {
			for stream.Receive() {
			}
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var p struct {
			Logs []struct{ Message string } `json:"logs"`
		}
		getJSON(t, s, "/v2/sandboxes/"+id+"/logs?search=holding", &p)
		if len(p.Logs) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the memory holder never printed")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if code, _, _ := a.do(http.MethodDelete, "/sandboxes/"+id, nil); code != http.StatusNoContent {
		t.Fatalf("kill: %d", code)
	}
	var evs []struct {
		Type      string `json:"type"`
		EventData struct {
			Postmortem struct {
				Processes []struct {
					PID      int    `json:"pid"`
					Command  string `json:"command"`
					RSSBytes uint64 `json:"rss_bytes"`
				} `json:"processes"`
				Resources  map[string]any `json:"resources"`
				LastOutput []string       `json:"last_output"`
			} `json:"postmortem"`
		} `json:"eventData"`
	}
	getJSON(t, s, "/events/sandboxes/"+id+"?type=sandbox.lifecycle.killed", &evs)
	if len(evs) != 1 {
		t.Fatalf("killed events: %+v", evs)
	}
	pm := evs[0].EventData.Postmortem
	t.Run("the process that held the memory comes first, with its RSS", func(t *testing.T) {
		if len(pm.Processes) < 2 || !strings.Contains(pm.Processes[0].Command, "python3") || pm.Processes[0].RSSBytes < 150<<20 {
			t.Errorf("processes %+v", pm.Processes)
		}
		envd := false
		for _, p := range pm.Processes {
			envd = envd || (p.PID == 1 && strings.Contains(p.Command, "envd"))
		}
		if !envd {
			t.Errorf("envd (pid 1) missing from %+v", pm.Processes)
		}
	})
	t.Run("the last output and the resources at the kill are kept", func(t *testing.T) {
		if len(pm.LastOutput) == 0 || !strings.Contains(strings.Join(pm.LastOutput, "\n"), "holding memory") {
			t.Errorf("last output %v", pm.LastOutput)
		}
		if mem, _ := pm.Resources["memory_bytes"].(float64); mem < 150<<20 {
			t.Errorf("resources %v", pm.Resources)
		}
	})
}

func TestTraceJoinsEverySideOfOneRequest(t *testing.T) {
	s := covetest.Start(t, "")
	a := client{t: t, url: s.URL, key: s.Key}
	id := a.create(nil)
	// The client gives up after the first line; the process goes on and exits 0.
	ctx, cancel := context.WithCancel(context.Background())
	c := processconnect.NewProcessClient(http.DefaultClient, s.URL)
	req := connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-c", "echo first; sleep 0.5; echo second"}}})
	req.Header().Set("E2b-Sandbox-Id", id)
	req.Header().Set("X-E2B-Request-Id", "req-trace-1")
	stream, err := c.Start(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	for stream.Receive() {
		if string(stream.Msg().GetEvent().GetData().GetStdout()) == "first\n" {
			break
		}
	}
	cancel()
	time.Sleep(1500 * time.Millisecond) // the process finishes; lines are flushed
	var tl struct {
		Entries []struct {
			Source  string         `json:"source"`
			Message string         `json:"message"`
			Fields  map[string]any `json:"fields"`
		} `json:"entries"`
	}
	if code := getJSON(t, s, "/traces/req-trace-1", &tl); code != http.StatusOK {
		t.Fatalf("GET /traces: %d", code)
	}
	var steps []string
	for _, e := range tl.Entries {
		steps = append(steps, e.Source+": "+e.Message)
	}
	joined := strings.Join(steps, "\n")
	for _, want := range []string{"server: proxy", "envd: stream end", "process: first", "command: process", "exited 0"} {
		if !strings.Contains(joined, want) {
			t.Errorf("timeline lacks %q:\n%s", want, joined)
		}
	}
	for _, e := range tl.Entries {
		if e.Source == "envd" && e.Message == "stream end" && fmt.Sprint(e.Fields["stream.end"]) != "client_cancel" {
			t.Errorf("envd's stream end: %v", e.Fields)
		}
	}
}

func TestATemplateCanSwitchOutputCollectionOff(t *testing.T) {
	s := covetest.Start(t, "")
	a := client{t: t, url: s.URL, key: s.Key}
	name := fmt.Sprintf("quiet-%d", time.Now().UnixNano()%1e9)
	cli(t, s, "template", "build", name, "--from", "base", "--templates", covetest.Templates(t))
	t.Cleanup(func() { cli(t, s, "template", "rm", name, "--templates", covetest.Templates(t)) })
	cli(t, s, "template", "set", name, "--collect-logs=false", "--templates", covetest.Templates(t))

	quiet := a.create(map[string]any{"templateID": name})
	loud := a.create(map[string]any{"templateID": name, "collectLogs": true}) // the request wins
	for _, id := range []string{quiet, loud} {
		run(t, s, id, "echo line-of-"+id, "req-switch-"+id)
	}
	time.Sleep(500 * time.Millisecond)
	for id, want := range map[string]bool{quiet: false, loud: true} {
		var p struct {
			Logs []struct{ Message string } `json:"logs"`
		}
		getJSON(t, s, "/v2/sandboxes/"+id+"/logs?search=line-of", &p)
		if got := len(p.Logs) > 0; got != want {
			t.Errorf("sandbox %s: output collected %v, want %v", id, got, want)
		}
		var cmds struct {
			Commands []map[string]any `json:"commands"`
		}
		getJSON(t, s, "/sandboxes/"+id+"/commands", &cmds)
		if len(cmds.Commands) == 0 {
			t.Errorf("sandbox %s: command records are kept either way, got none", id)
		}
	}
}

func TestBinaryOutputIsOneSummaryLineAndABase64Record(t *testing.T) {
	s := covetest.Start(t, "")
	a := client{t: t, url: s.URL, key: s.Key}
	id := a.create(map[string]any{})
	run(t, s, id, `head -c 3000000 /dev/zero`, "req-binary")
	var page struct {
		Logs []struct {
			Message string `json:"message"`
		} `json:"logs"`
	}
	var rec map[string]any
	deadline := time.Now().Add(10 * time.Second)
	for {
		getJSON(t, s, "/v2/sandboxes/"+id+"/logs?request_id=req-binary&limit=100", &page)
		var cmds struct {
			Commands []map[string]any `json:"commands"`
		}
		getJSON(t, s, "/sandboxes/"+id+"/commands", &cmds)
		for _, c := range cmds.Commands {
			if c["requestId"] == "req-binary" && c["endCause"] == "exited" {
				rec = c
			}
		}
		if rec != nil && slices.ContainsFunc(page.Logs, func(l struct {
			Message string `json:"message"`
		}) bool {
			return strings.HasPrefix(l.Message, "binary output")
		}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s: lines %+v, record %v", page.Logs, rec)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Run("the output is one summary line with its size, crc32c and sha256", func(t *testing.T) {
		// The request's lines are envd's own (process start, end) and the command's: of
		// these, one summary and no NUL.
		summaries := 0
		for _, l := range page.Logs {
			// The sha256 is given up, said so, when its hasher falls behind the output (a loaded
			// machine): envd never slows the command's output for it.
			if strings.HasPrefix(l.Message, "binary output, 2.9 MiB, crc32c ae8cb66e, sha256 35bce4eae54ec8e6cc2868baa8d157914d6ae2858811b4cc0c078c94460fa26f") ||
				l.Message == "binary output, 2.9 MiB, crc32c ae8cb66e, sha256 not computed: over budget" {
				summaries++
			}
			if strings.Contains(l.Message, "\x00") {
				t.Errorf("a line holds a NUL: %q", l.Message)
			}
		}
		if summaries != 1 {
			t.Errorf("%d summaries of the 3,000,000 zeros in %+v", summaries, page.Logs)
		}
	})
	t.Run("the record keeps a base64 head and tail", func(t *testing.T) {
		head, _ := rec["stdoutHead"].(string)
		tail, _ := rec["stdoutTail"].(string)
		if !strings.HasPrefix(head, "base64:AAAA") || !strings.HasPrefix(tail, "base64:AAAA") || len(head) > 8000 {
			t.Errorf("record %v", rec)
		}
	})
}
