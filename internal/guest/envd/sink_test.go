package envd_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/cove-dev/cove/internal/guest/envd"
	"github.com/cove-dev/cove/internal/guest/envd/process"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	pb "github.com/cove-dev/cove/sdk/gen/process"
	"github.com/cove-dev/cove/sdk/gen/process/processconnect"
)

// records parses the sink's JSON lines by kind.
func records(t *testing.T, out *logBuffer) map[string][]map[string]any {
	t.Helper()
	by := map[string][]map[string]any{}
	sc := bufio.NewScanner(strings.NewReader(out.String()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("sink line is not JSON: %q", sc.Text())
		}
		by[m["kind"].(string)] = append(by[m["kind"].(string)], m)
	}
	return by
}

func startWithSink(t *testing.T, linesPerSec int) (processconnect.ProcessClient, string, *logBuffer) {
	t.Helper()
	out := &logBuffer{}
	sink := process.NewSink(out, process.Budget{LinesPerSec: linesPerSec})
	srv := envd.New(envd.Config{Logger: telemetry.NewLogger(&logBuffer{}, slog.LevelInfo), Sink: sink})
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return processconnect.NewProcessClient(http.DefaultClient, ts.URL), ts.URL, out
}

func runReq(t *testing.T, c processconnect.ProcessClient, ctx context.Context, script, reqID string) result {
	t.Helper()
	req := connect.NewRequest(bash(script))
	withHeaders(req, reqID, "")
	stream, err := c.Start(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	return collect[*pb.StartResponse](stream)
}

// endOf waits for the command_end record of the command started by reqID.
func endOf(t *testing.T, out *logBuffer, reqID string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		for _, r := range records(t, out)["command_end"] {
			if r["request_id"] == reqID {
				return r
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no command_end for %s in:\n%s", reqID, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestSinkRecordsOutputLinesAndCommands(t *testing.T) {
	t.Parallel()
	c, url, out := startWithSink(t, 0)

	t.Run("output lines carry pid, stream and request id, and a last line without newline is kept", func(t *testing.T) {
		r := runReq(t, c, context.Background(), "echo one; echo two >&2; printf three", "sink-lines")
		end := endOf(t, out, "sink-lines")
		var got []string
		for _, l := range records(t, out)["output"] {
			if l["request_id"] == "sink-lines" {
				if l["pid"].(float64) != float64(r.pid) {
					t.Errorf("line pid %v, want %d", l["pid"], r.pid)
				}
				got = append(got, l["stream"].(string)+":"+l["line"].(string))
			}
		}
		want := map[string]bool{"stdout:one": true, "stderr:two": true, "stdout:three": true}
		if len(got) != 3 || !want[got[0]] || !want[got[1]] || !want[got[2]] {
			t.Errorf("output lines %v", got)
		}
		if end["end_cause"] != "exited" || end["exit_code"] != float64(0) || end["stdout_head"] != "one\nthree" {
			t.Errorf("command_end %v", end)
		}
		var start map[string]any
		for _, s := range records(t, out)["command_start"] {
			if s["request_id"] == "sink-lines" {
				start = s
			}
		}
		if start == nil || start["command"] != "/bin/bash" || start["cwd"] == "" {
			t.Errorf("command_start %v", start)
		}
	})

	t.Run("a large output keeps its head and its tail", func(t *testing.T) {
		runReq(t, c, context.Background(), `echo HEAD-MARK; for i in $(seq 3000); do echo line-$i-padding-padding; done; echo TAIL-MARK`, "sink-big")
		end := endOf(t, out, "sink-big")
		head, tail := end["stdout_head"].(string), end["stdout_tail"].(string)
		if !strings.HasPrefix(head, "HEAD-MARK") || !strings.HasSuffix(tail, "TAIL-MARK\n") {
			t.Errorf("head starts %q, tail ends %q", head[:20], tail[len(tail)-20:])
		}
		if len(head) > 4096+256 || len(tail) > 4096+256 || end["stdout_bytes"].(float64) < 60000 {
			t.Errorf("head %d, tail %d bytes of %v", len(head), len(tail), end["stdout_bytes"])
		}
	})

	t.Run("a SendSignal kill is recorded as killed with the killer's request id", func(t *testing.T) {
		tag := "sink-victim"
		req := connect.NewRequest(bash("sleep 30"))
		req.Msg.Tag = &tag
		withHeaders(req, "sink-kill-start", "")
		stream, err := c.Start(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		stream.Receive()
		kill := connect.NewRequest(&pb.SendSignalRequest{Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Tag{Tag: tag}}, Signal: pb.Signal_SIGNAL_SIGKILL})
		withHeaders(kill, "sink-killer", "")
		if _, err := c.SendSignal(context.Background(), kill); err != nil {
			t.Fatal(err)
		}
		collect[*pb.StartResponse](stream)
		end := endOf(t, out, "sink-kill-start")
		if end["end_cause"] != "killed" || end["signal_request_id"] != "sink-killer" || end["signal"] != "SIGKILL" {
			t.Errorf("command_end %v", end)
		}
	})

	t.Run("a deadline kill is recorded as timeout", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		runReq(t, c, ctx, "sleep 30", "sink-deadline")
		if end := endOf(t, out, "sink-deadline"); end["end_cause"] != "timeout" {
			t.Errorf("command_end %v", end)
		}
	})

	t.Run("init can switch output lines off while command records stay", func(t *testing.T) {
		if err := postInit(url, `{"collectOutput":false}`); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = postInit(url, `{"collectOutput":true}`) })
		runReq(t, c, context.Background(), "echo hidden-line", "sink-off")
		endOf(t, out, "sink-off")
		if strings.Contains(out.String(), `"line":"hidden-line"`) {
			t.Error("an output line was collected with collection off")
		}
	})
}

func TestSinkCommandStartCarriesTheCommandsEnvSecretsForTheHost(t *testing.T) {
	t.Parallel()
	c, _, out := startWithSink(t, 0)
	req := connect.NewRequest(bash("true"))
	req.Msg.Process.Envs = map[string]string{"DEPLOY_TOKEN": "tok-9f8e7d6c", "GREETING": "hello-world"}
	withHeaders(req, "sink-secrets", "")
	stream, err := c.Start(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	collect[*pb.StartResponse](stream)
	endOf(t, out, "sink-secrets")
	for _, s := range records(t, out)["command_start"] {
		if s["request_id"] != "sink-secrets" {
			continue
		}
		if got := fmt.Sprint(s["secrets"]); got != "[tok-9f8e7d6c]" {
			t.Errorf("secrets %s, want only the value of the secret-looking name", got)
		}
		return
	}
	t.Error("no command_start record")
}

func TestSinkRateLimitCountsDroppedLines(t *testing.T) {
	t.Parallel()
	c, _, out := startWithSink(t, 50)
	runReq(t, c, context.Background(), "seq 2000", "sink-flood")
	end := endOf(t, out, "sink-flood")
	if d, _ := end["lines_dropped"].(float64); d < 1000 {
		t.Errorf("lines_dropped %v, want most of 2000 lines over a 50/s limit", end["lines_dropped"])
	}
	n := 0
	for _, l := range records(t, out)["output"] {
		if l["request_id"] == "sink-flood" {
			n++
		}
	}
	if n == 0 || n > 200 {
		t.Errorf("%d lines kept, want the burst only", n)
	}
}

func TestSinkBinaryOutputIsSummarisedNotEscaped(t *testing.T) {
	t.Parallel()
	c, _, out := startWithSink(t, 0)
	runReq(t, c, context.Background(), "echo text-first; head -c 300000 /dev/zero; head -c 300000 /dev/zero", "sink-binary")
	end := endOf(t, out, "sink-binary")
	var got []map[string]any
	for _, l := range records(t, out)["output"] {
		if l["request_id"] == "sink-binary" {
			got = append(got, l)
		}
	}
	if len(got) == 0 || len(got) > 2 {
		t.Fatalf("%d output lines, want the text line (unless it shared a read with the zeros) and one summary: %v", len(got), got)
	}
	last := got[len(got)-1]
	if last["binary"] != true || !strings.HasPrefix(last["line"].(string), "binary output, ") || !strings.Contains(last["line"].(string), "sha256 ") {
		t.Errorf("summary %v", last)
	}
	if strings.Contains(out.String(), `\u0000`) {
		t.Error("a NUL byte was escaped into the record stream")
	}
	if end["stdout_binary"] != true || end["stdout_bytes"].(float64) != float64(600000+len("text-first\n")) {
		t.Errorf("command_end %v", end)
	}
	if head, _ := end["stdout_head"].(string); len(head) == 0 || strings.ContainsAny(head, "\x00\\") {
		t.Errorf("head %q is not base64", head)
	}
	if d, _ := end["bytes_dropped"].(float64); d < 600000 {
		t.Errorf("bytes_dropped %v, want the binary output counted", end["bytes_dropped"])
	}
}
