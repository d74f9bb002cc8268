package envd_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/user"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/cove-dev/cove/internal/guest/envd"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	pb "github.com/cove-dev/cove/sdk/gen/process"
	"github.com/cove-dev/cove/sdk/gen/process/processconnect"
)

// logBuffer collects envd's JSON log lines for assertions.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// lines returns the parsed log lines whose fields match all of want.
func (l *logBuffer) lines(t *testing.T, want map[string]any) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(l.String(), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line is not JSON: %q", line)
		}
		ok := true
		for k, v := range want {
			if got, present := m[k]; !present || got != v {
				ok = false
				break
			}
		}
		if ok {
			out = append(out, m)
		}
	}
	return out
}

// waitLine waits for exactly one log line matching want and returns it.
func (l *logBuffer) waitLine(t *testing.T, want map[string]any) map[string]any {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := l.lines(t, want)
		if len(got) == 1 {
			time.Sleep(50 * time.Millisecond) // a duplicate would show up now
			if got = l.lines(t, want); len(got) != 1 {
				t.Fatalf("want exactly one line matching %v, got %d:\n%s", want, len(got), l.String())
			}
			return got[0]
		}
		if len(got) > 1 {
			t.Fatalf("want exactly one line matching %v, got %d:\n%s", want, len(got), l.String())
		}
		if time.Now().After(deadline) {
			t.Fatalf("no log line matching %v in:\n%s", want, l.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type harness struct {
	url  string
	logs *logBuffer
	srv  *envd.Server
}

func start(t *testing.T) *harness {
	t.Helper()
	logs := &logBuffer{}
	srv := envd.New(envd.Config{
		Logger:          telemetry.NewLogger(logs, slog.LevelDebug),
		KeepEnded:       2 * time.Second,
		MaxMessageBytes: 1 << 20,
	})
	ts := httptest.NewUnstartedServer(srv.Handler())
	ts.Config.Protocols = new(http.Protocols)
	ts.Config.Protocols.SetHTTP1(true)
	ts.Config.Protocols.SetUnencryptedHTTP2(true)
	ts.Start()
	t.Cleanup(ts.Close)
	return &harness{url: ts.URL, logs: logs, srv: srv}
}

func (h *harness) client(opts ...connect.ClientOption) processconnect.ProcessClient {
	return processconnect.NewProcessClient(http.DefaultClient, h.url, opts...)
}

func withHeaders(req connect.AnyRequest, requestID, user string) {
	if requestID != "" {
		req.Header().Set(telemetry.HeaderRequestID, requestID)
	}
	if user != "" {
		req.Header().Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":")))
	}
}

func bash(script string) *pb.StartRequest {
	f := false
	return &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-c", script}}, Stdin: &f}
}

type result struct {
	pid             uint32
	stdout, stderr  string
	pty             string
	end             *pb.ProcessEvent_EndEvent
	keepalives      int
	firstEventStart bool
	err             error
}

// collect reads a process stream to its end.
func collect[T interface{ GetEvent() *pb.ProcessEvent }](s interface {
	Receive() bool
	Msg() T
	Err() error
}) result {
	var r result
	first := true
	for s.Receive() {
		ev := s.Msg().GetEvent()
		if first {
			r.firstEventStart = ev.GetStart() != nil
			first = false
		}
		switch e := ev.GetEvent().(type) {
		case *pb.ProcessEvent_Start:
			r.pid = e.Start.GetPid()
		case *pb.ProcessEvent_Data:
			r.stdout += string(e.Data.GetStdout())
			r.stderr += string(e.Data.GetStderr())
			r.pty += string(e.Data.GetPty())
		case *pb.ProcessEvent_End:
			r.end = e.End
		case *pb.ProcessEvent_Keepalive:
			r.keepalives++
		}
	}
	r.err = s.Err()
	return r
}

func TestStartRunsACommandAndStreamsItsOutput(t *testing.T) {
	t.Parallel()
	h := start(t)
	for name, opts := range map[string][]connect.ClientOption{
		"connect json":   {connect.WithProtoJSON()},
		"connect binary": nil,
		"grpc-web":       {connect.WithGRPCWeb()},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			req := connect.NewRequest(bash("echo out; echo err >&2; exit 3"))
			stream, err := h.client(opts...).Start(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			r := collect[*pb.StartResponse](stream)
			if r.err != nil {
				t.Fatalf("stream error: %v", r.err)
			}
			if !r.firstEventStart || r.pid == 0 {
				t.Errorf("first event must be start with a pid, got pid %d", r.pid)
			}
			if r.stdout != "out\n" || r.stderr != "err\n" {
				t.Errorf("stdout %q stderr %q", r.stdout, r.stderr)
			}
			if r.end == nil || r.end.ExitCode != 3 || !r.end.Exited || r.end.Status != "exit status 3" {
				t.Errorf("end = %v, want exit 3", r.end)
			}
			if stream.ResponseHeader().Get(telemetry.HeaderRequestID) == "" {
				t.Error("no request id echoed")
			}
		})
	}
}

func TestGRPCOverH2C(t *testing.T) {
	t.Parallel()
	h := start(t)
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	c := processconnect.NewProcessClient(&http.Client{Transport: tr}, h.url, connect.WithGRPC())
	stream, err := c.Start(context.Background(), connect.NewRequest(bash("echo grpc")))
	if err != nil {
		t.Fatal(err)
	}
	if r := collect[*pb.StartResponse](stream); r.err != nil || r.stdout != "grpc\n" || r.end.GetExitCode() != 0 {
		t.Fatalf("grpc run: %+v", r)
	}
}

func TestCompletedStreamLogsOneInfoLineWithRequestAndOperationIDs(t *testing.T) {
	t.Parallel()
	h := start(t)
	req := connect.NewRequest(bash("printf hello"))
	withHeaders(req, "req-completed-1", "")
	stream, err := h.client().Start(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if r := collect[*pb.StartResponse](stream); r.err != nil {
		t.Fatal(r.err)
	}
	if got := stream.ResponseHeader().Get(telemetry.HeaderRequestID); got != "req-completed-1" {
		t.Errorf("echoed request id %q", got)
	}
	line := h.logs.waitLine(t, map[string]any{"msg": "stream end", "request_id": "req-completed-1"})
	want := map[string]any{"level": "INFO", "stream.end": "completed", "stream.phase": "after_exit",
		"rpc.method": "process.Process/Start", "rpc.connect.code": "ok", "stream.bytes_sent": float64(5)}
	for k, v := range want {
		if line[k] != v {
			t.Errorf("%s = %v, want %v (line %v)", k, line[k], v, line)
		}
	}
	if line["operation_id"] == nil || line["process.pid"] == nil || line["duration_ms"] == nil {
		t.Errorf("missing operation_id, pid or duration: %v", line)
	}
	end := h.logs.waitLine(t, map[string]any{"msg": "process end", "request_id": "req-completed-1"})
	if end["process.exit.code"] != float64(0) || end["process.stdout_bytes"] != float64(5) {
		t.Errorf("process end line %v", end)
	}
}

func TestClientCancelLeavesTheProcessRunning(t *testing.T) {
	t.Parallel()
	h := start(t)
	ctx, cancel := context.WithCancel(context.Background())
	req := connect.NewRequest(bash("echo first; sleep 0.7; echo second"))
	withHeaders(req, "req-cancel-1", "")
	stream, err := h.client().Start(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	var pid uint32
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		if ev.GetStart() != nil {
			pid = ev.GetStart().GetPid()
		}
		if string(ev.GetData().GetStdout()) == "first\n" {
			break
		}
	}
	cancel()
	_ = stream.Close()

	line := h.logs.waitLine(t, map[string]any{"msg": "stream end", "request_id": "req-cancel-1"})
	if line["level"] != "INFO" || line["stream.end"] != "client_cancel" || line["stream.phase"] != "streaming" || line["rpc.connect.code"] != "canceled" {
		t.Errorf("client cancel line: %v", line)
	}

	// The process goes on: a new stream gets its later output and its end.
	creq := connect.NewRequest(&pb.ConnectRequest{Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}})
	withHeaders(creq, "req-reconnect-1", "")
	cs, err := h.client().Connect(context.Background(), creq)
	if err != nil {
		t.Fatal(err)
	}
	r := collect[*pb.ConnectResponse](cs)
	if r.err != nil || r.stdout != "second\n" || r.end.GetExitCode() != 0 || r.pid != pid {
		t.Fatalf("reconnect: %+v", r)
	}
	h.logs.waitLine(t, map[string]any{"msg": "stream end", "request_id": "req-reconnect-1", "stream.end": "completed", "rpc.method": "process.Process/Connect"})
}

func TestDeadlineKillsTheProcessAndLogsWarn(t *testing.T) {
	t.Parallel()
	h := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	req := connect.NewRequest(bash("echo started; sleep 30"))
	withHeaders(req, "req-deadline-1", "")
	stream, err := h.client().Start(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	r := collect[*pb.StartResponse](stream)
	if connect.CodeOf(r.err) != connect.CodeDeadlineExceeded {
		t.Errorf("client error %v, want deadline_exceeded", r.err)
	}
	line := h.logs.waitLine(t, map[string]any{"msg": "stream end", "request_id": "req-deadline-1"})
	if line["level"] != "WARN" || line["stream.end"] != "deadline" || line["rpc.connect.code"] != "deadline_exceeded" || line["stream.phase"] != "streaming" {
		t.Errorf("deadline line: %v", line)
	}
	end := h.logs.waitLine(t, map[string]any{"msg": "process end", "request_id": "req-deadline-1"})
	if end["process.signal"] != "SIGKILL" || end["signal.request_id"] != "req-deadline-1" {
		t.Errorf("process end line: %v", end)
	}
	if err := syscallKill0(int(r.pid)); err == nil {
		t.Errorf("process %d still alive after its deadline", r.pid)
	}
}

func TestSendSignalKillEndsTheStreamAndNamesTheKiller(t *testing.T) {
	t.Parallel()
	h := start(t)
	tag := "victim"
	req := connect.NewRequest(bash("echo up; sleep 30"))
	req.Msg.Tag = &tag
	withHeaders(req, "req-victim-1", "")
	stream, err := h.client().Start(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan result, 1)
	go func() { done <- collect[*pb.StartResponse](stream) }()
	h.logs.waitLine(t, map[string]any{"msg": "process start", "request_id": "req-victim-1"})

	kill := connect.NewRequest(&pb.SendSignalRequest{
		Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Tag{Tag: tag}},
		Signal:  pb.Signal_SIGNAL_SIGKILL,
	})
	withHeaders(kill, "req-killer-1", "")
	if _, err := h.client().SendSignal(context.Background(), kill); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || r.end == nil || r.end.Exited || r.end.Status != "signal: killed" || r.end.ExitCode != -1 {
		t.Fatalf("killed stream: %+v end %v", r, r.end)
	}
	line := h.logs.waitLine(t, map[string]any{"msg": "stream end", "request_id": "req-victim-1"})
	if line["stream.end"] != "completed" || line["level"] != "INFO" {
		t.Errorf("stream end after kill: %v", line)
	}
	end := h.logs.waitLine(t, map[string]any{"msg": "process end", "request_id": "req-victim-1"})
	if end["signal.request_id"] != "req-killer-1" || end["process.signal"] != "SIGKILL" {
		t.Errorf("process end does not name the killer: %v", end)
	}
	// Signalling a gone process is not_found.
	_, err = h.client().SendSignal(context.Background(), kill)
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("second kill: %v, want not_found", err)
	}
}

func TestSignalReachesTheWholeProcessTree(t *testing.T) {
	t.Parallel()
	h := start(t)
	// A child keeps stdout open, as npx-style wrappers do; killing the parent must end the stream.
	stream, err := h.client().Start(context.Background(), connect.NewRequest(bash("sleep 60 & sleep 60 & wait")))
	if err != nil {
		t.Fatal(err)
	}
	stream.Receive()
	pid := stream.Msg().GetEvent().GetStart().GetPid()
	done := make(chan result, 1)
	go func() { done <- collect[*pb.StartResponse](stream) }()
	_, err = h.client().SendSignal(context.Background(), connect.NewRequest(&pb.SendSignalRequest{
		Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}, Signal: pb.Signal_SIGNAL_SIGKILL}))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.err != nil || r.end == nil {
			t.Fatalf("stream after tree kill: %+v", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("stream did not end after SIGKILL of a process whose children hold stdout")
	}
}

func TestBackgroundChildHoldingStdoutDoesNotHoldTheStream(t *testing.T) {
	t.Parallel()
	h := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stream, err := h.client().Start(ctx, connect.NewRequest(bash("(sleep 3; echo late) & echo now")))
	if err != nil {
		t.Fatal(err)
	}
	r := collect[*pb.StartResponse](stream)
	if r.err != nil || r.stdout != "now\n" || r.end.GetExitCode() != 0 {
		t.Fatalf("%+v", r)
	}
}

func TestLateConnectGetsTheKeptEndEvent(t *testing.T) {
	t.Parallel()
	h := start(t)
	stream, err := h.client().Start(context.Background(), connect.NewRequest(bash("exit 4")))
	if err != nil {
		t.Fatal(err)
	}
	first := collect[*pb.StartResponse](stream)
	sel := &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: first.pid}}
	cs, err := h.client().Connect(context.Background(), connect.NewRequest(&pb.ConnectRequest{Process: sel}))
	if err != nil {
		t.Fatal(err)
	}
	r := collect[*pb.ConnectResponse](cs)
	if r.err != nil || !r.firstEventStart || r.end.GetExitCode() != 4 {
		t.Fatalf("late connect: %+v", r)
	}
	// After KeepEnded (2 s here) it is forgotten.
	time.Sleep(2500 * time.Millisecond)
	cs, _ = h.client().Connect(context.Background(), connect.NewRequest(&pb.ConnectRequest{Process: sel}))
	if r := collect[*pb.ConnectResponse](cs); connect.CodeOf(r.err) != connect.CodeNotFound {
		t.Fatalf("connect after retention: %v, want not_found", r.err)
	}
}

func TestTagsAreUniqueAmongRunningProcessesAndListShowsThem(t *testing.T) {
	t.Parallel()
	h := start(t)
	tag := "server-1"
	req := connect.NewRequest(bash("sleep 30"))
	req.Msg.Tag = &tag
	req.Msg.Process.Envs = map[string]string{"X": "1"}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := h.client().Start(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	stream.Receive()
	pid := stream.Msg().GetEvent().GetStart().GetPid()

	dup, _ := h.client().Start(context.Background(), connect.NewRequest(req.Msg))
	if r := collect[*pb.StartResponse](dup); connect.CodeOf(r.err) != connect.CodeAlreadyExists {
		t.Errorf("duplicate tag: %v, want already_exists", r.err)
	}
	list, err := h.client().List(context.Background(), connect.NewRequest(&pb.ListRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range list.Msg.GetProcesses() {
		if p.GetPid() == pid {
			found = p.GetTag() == tag && p.GetConfig().GetCmd() == "/bin/bash" && p.GetConfig().GetEnvs()["X"] == "1"
		}
	}
	if !found {
		t.Errorf("list does not show pid %d with its tag and config: %v", pid, list.Msg)
	}
	_, _ = h.client().SendSignal(context.Background(), connect.NewRequest(&pb.SendSignalRequest{
		Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Tag{Tag: tag}}, Signal: pb.Signal_SIGNAL_SIGTERM}))
	r := collect[*pb.StartResponse](stream)
	if r.end == nil || r.end.Status != "signal: terminated" {
		t.Errorf("SIGTERM end: %v", r.end)
	}
}

func TestStdinPipeSendInputStreamInputAndCloseStdin(t *testing.T) {
	t.Parallel()
	h := start(t)
	req := connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "cat"}}) // stdin unset: a pipe
	stream, err := h.client().Start(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	stream.Receive()
	pid := stream.Msg().GetEvent().GetStart().GetPid()
	done := make(chan result, 1)
	go func() { done <- collect[*pb.StartResponse](stream) }()
	sel := &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}

	if _, err := h.client().SendInput(context.Background(), connect.NewRequest(&pb.SendInputRequest{
		Process: sel, Input: &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte("one ")}}})); err != nil {
		t.Fatal(err)
	}
	in := h.client().StreamInput(context.Background())
	msgs := []*pb.StreamInputRequest{
		{Event: &pb.StreamInputRequest_Start{Start: &pb.StreamInputRequest_StartEvent{Process: sel}}},
		{Event: &pb.StreamInputRequest_Data{Data: &pb.StreamInputRequest_DataEvent{Input: &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte("two ")}}}}},
		{Event: &pb.StreamInputRequest_Keepalive{Keepalive: &pb.StreamInputRequest_KeepAlive{}}},
		{Event: &pb.StreamInputRequest_Data{Data: &pb.StreamInputRequest_DataEvent{Input: &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte("three")}}}}},
	}
	for _, m := range msgs {
		if err := in.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := in.CloseAndReceive(); err != nil {
		t.Fatal(err)
	}
	if _, err := h.client().CloseStdin(context.Background(), connect.NewRequest(&pb.CloseStdinRequest{Process: sel})); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.stdout != "one two three" || r.end.GetExitCode() != 0 {
		t.Fatalf("cat echoed %q, end %v", r.stdout, r.end)
	}
}

func TestStdinFalseGivesDevNull(t *testing.T) {
	t.Parallel()
	h := start(t)
	f := false
	stream, err := h.client().Start(context.Background(), connect.NewRequest(&pb.StartRequest{
		Process: &pb.ProcessConfig{Cmd: "cat"}, Stdin: &f}))
	if err != nil {
		t.Fatal(err)
	}
	r := collect[*pb.StartResponse](stream)
	if r.err != nil || r.end.GetExitCode() != 0 || r.stdout != "" {
		t.Fatalf("cat with /dev/null stdin: %+v", r)
	}
	_, err = h.client().CloseStdin(context.Background(), connect.NewRequest(&pb.CloseStdinRequest{
		Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: 999999}}}))
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("close stdin of unknown pid: %v", err)
	}
}

func TestPTYSessionWithInputAndResize(t *testing.T) {
	t.Parallel()
	h := start(t)
	req := connect.NewRequest(&pb.StartRequest{
		Process: &pb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"--norc", "--noprofile", "-i"}, Envs: map[string]string{"TERM": "xterm", "PS1": "$ "}},
		Pty:     &pb.PTY{Size: &pb.PTY_Size{Cols: 80, Rows: 24}},
	})
	stream, err := h.client().Start(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	stream.Receive()
	pid := stream.Msg().GetEvent().GetStart().GetPid()
	done := make(chan result, 1)
	go func() { done <- collect[*pb.StartResponse](stream) }()
	sel := &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}
	if _, err := h.client().Update(context.Background(), connect.NewRequest(&pb.UpdateRequest{
		Process: sel, Pty: &pb.PTY{Size: &pb.PTY_Size{Cols: 100, Rows: 40}}})); err != nil {
		t.Fatal(err)
	}
	send := func(s string) {
		if _, err := h.client().SendInput(context.Background(), connect.NewRequest(&pb.SendInputRequest{
			Process: sel, Input: &pb.ProcessInput{Input: &pb.ProcessInput_Pty{Pty: []byte(s)}}})); err != nil {
			t.Fatal(err)
		}
	}
	send("echo $((6*7)); stty size\n")
	send("exit 5\n")
	r := <-done
	if !strings.Contains(r.pty, "42") || !strings.Contains(r.pty, "40 100") {
		t.Errorf("pty output %q lacks 42 or the new size", r.pty)
	}
	if r.end.GetExitCode() != 5 {
		t.Errorf("pty end %v", r.end)
	}
	// CloseStdin and stdin input make no sense for a PTY.
	_, err = h.client().CloseStdin(context.Background(), connect.NewRequest(&pb.CloseStdinRequest{Process: sel}))
	if err == nil {
		t.Error("CloseStdin on an ended PTY process succeeded")
	}
}

func TestUsersEnvAndCwd(t *testing.T) {
	t.Parallel()
	h := start(t)
	if err := postInit(h.url, `{"envVars":{"SANDBOX_A":"sa","SHARED":"sandbox"}}`); err != nil {
		t.Fatal(err)
	}
	self, _ := user.Current()
	run := func(t *testing.T, req *pb.StartRequest, as string) result {
		t.Helper()
		r := connect.NewRequest(req)
		withHeaders(r, "", as)
		stream, err := h.client().Start(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		return collect[*pb.StartResponse](stream)
	}
	t.Run("env precedence is base, sandbox, request", func(t *testing.T) {
		req := bash(`echo "$SANDBOX_A $SHARED $REQ $USER $HOME"`)
		req.Process.Envs = map[string]string{"SHARED": "request", "REQ": "r"}
		r := run(t, req, "")
		want := "sa request r " + self.Username + " " + self.HomeDir + "\n"
		if r.stdout != want {
			t.Errorf("got %q want %q", r.stdout, want)
		}
	})
	t.Run("relative cwd is taken from home", func(t *testing.T) {
		dir, _ := os.MkdirTemp(self.HomeDir, "cove-cwd-")
		t.Cleanup(func() { os.RemoveAll(dir) })
		cwd := strings.TrimPrefix(dir, self.HomeDir+"/")
		req := bash("pwd")
		req.Process.Cwd = &cwd
		if r := run(t, req, ""); r.stdout != dir+"\n" {
			t.Errorf("pwd %q want %q", r.stdout, dir)
		}
	})
	t.Run("a missing cwd is invalid_argument", func(t *testing.T) {
		cwd := "/no/such/dir"
		req := bash("pwd")
		req.Process.Cwd = &cwd
		if r := run(t, req, ""); connect.CodeOf(r.err) != connect.CodeInvalidArgument {
			t.Errorf("got %v", r.err)
		}
	})
	t.Run("an unknown user is unauthenticated, as in E2B", func(t *testing.T) {
		if r := run(t, bash("id"), "no-such-user-xyz"); connect.CodeOf(r.err) != connect.CodeUnauthenticated {
			t.Errorf("got %v", r.err)
		}
	})
	t.Run("an unknown command is not_found", func(t *testing.T) {
		r := run(t, &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "no-such-command-xyz"}}, "")
		if connect.CodeOf(r.err) != connect.CodeNotFound {
			t.Errorf("got %v", r.err)
		}
	})
	t.Run("basic auth picks the user", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("envd: running as another user needs root")
		}
		if _, err := user.Lookup("nobody"); err != nil {
			t.Skip("envd: no nobody account on this machine")
		}
		r := run(t, bash("whoami; echo $USER"), "nobody")
		if r.stdout != "nobody\nnobody\n" {
			t.Errorf("got %q", r.stdout)
		}
	})
}

func TestErrorsCarryTheRequestID(t *testing.T) {
	t.Parallel()
	h := start(t)
	req := connect.NewRequest(&pb.SendSignalRequest{
		Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: 999999}}, Signal: pb.Signal_SIGNAL_SIGKILL})
	withHeaders(req, "req-err-1", "")
	_, err := h.client(connect.WithProtoJSON()).SendSignal(context.Background(), req)
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeNotFound {
		t.Fatalf("got %v", err)
	}
	if !strings.Contains(ce.Message(), "req-err-1") {
		t.Errorf("message %q lacks the request id", ce.Message())
	}
	found := false
	for _, d := range ce.Details() {
		if v, err := d.Value(); err == nil {
			if ri, ok := v.(*errdetails.RequestInfo); ok && ri.RequestId == "req-err-1" {
				found = true
			}
		}
	}
	if !found {
		t.Error("no google.rpc.RequestInfo detail with the request id")
	}
	if ce.Meta().Get(telemetry.HeaderRequestID) != "req-err-1" {
		t.Error("request id header not echoed on error")
	}
	line := h.logs.waitLine(t, map[string]any{"msg": "rpc", "request_id": "req-err-1"})
	if line["rpc.connect.code"] != "not_found" || line["level"] != "WARN" || line["operation_id"] == nil {
		t.Errorf("rpc line %v", line)
	}

	// Without a client id, one is minted and still echoed.
	_, err = h.client().SendSignal(context.Background(), connect.NewRequest(req.Msg))
	if !errors.As(err, &ce) || ce.Meta().Get(telemetry.HeaderRequestID) == "" || !strings.Contains(ce.Message(), ce.Meta().Get(telemetry.HeaderRequestID)) {
		t.Errorf("minted id not echoed: %v", err)
	}
}

func TestKeepalivesFollowTheClientInterval(t *testing.T) {
	t.Parallel()
	h := start(t)
	req := connect.NewRequest(bash("sleep 2.3"))
	req.Header().Set("Keepalive-Ping-Interval", "1")
	stream, err := h.client().Start(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if r := collect[*pb.StartResponse](stream); r.keepalives < 2 {
		t.Errorf("got %d keepalives in 2.3 s at a 1 s interval", r.keepalives)
	}
}

func TestEnvValuesNeverReachTheLog(t *testing.T) {
	t.Parallel()
	h := start(t)
	const secret = "s3cr3t-value-do-not-log"
	if err := postInit(h.url, `{"envVars":{"INIT_SECRET":"`+secret+`"},"accessToken":"tok-`+secret+`"}`); err != nil {
		t.Fatal(err)
	}
	req := connect.NewRequest(bash("true"))
	req.Header().Set("X-Access-Token", "tok-"+secret)
	req.Msg.Process.Envs = map[string]string{"API_KEY": secret}
	stream, err := h.client().Start(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	collect[*pb.StartResponse](stream)
	h.logs.waitLine(t, map[string]any{"msg": "process end"})
	if logs := h.logs.String(); strings.Contains(logs, secret) {
		t.Fatalf("a secret value reached the log:\n%s", logs)
	}
	if !strings.Contains(h.logs.String(), "API_KEY") {
		t.Error("env var names should be logged")
	}
}

func TestAccessTokenIsRequiredOnceSet(t *testing.T) {
	t.Parallel()
	h := start(t)
	if err := postInit(h.url, `{"accessToken":"tok-1"}`); err != nil {
		t.Fatal(err)
	}
	_, err := h.client().List(context.Background(), connect.NewRequest(&pb.ListRequest{}))
	if connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("no token: %v", err)
	}
	req := connect.NewRequest(&pb.ListRequest{})
	req.Header().Set("X-Access-Token", "tok-1")
	if _, err := h.client().List(context.Background(), req); err != nil {
		t.Errorf("with token: %v", err)
	}
	res, err := http.Get(h.url + "/health")
	if err != nil || res.StatusCode != http.StatusNoContent {
		t.Errorf("/health must stay open: %v %v", res.StatusCode, err)
	}
	res, _ = http.Get(h.url + "/envs")
	if res.StatusCode != http.StatusUnauthorized {
		t.Errorf("/envs without token: %d", res.StatusCode)
	}
}

func TestHealthMetricsAndEnvs(t *testing.T) {
	t.Parallel()
	h := start(t)
	if err := postInit(h.url, `{"envVars":{"K":"v"}}`); err != nil {
		t.Fatal(err)
	}
	res, err := http.Get(h.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.NewDecoder(res.Body).Decode(&m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"ts", "cpu_count", "cpu_used_pct", "mem_total", "mem_used", "mem_cache", "disk_used", "disk_total"} {
		if _, ok := m[k]; !ok {
			t.Errorf("/metrics lacks %s: %v", k, m)
		}
	}
	if m["mem_total"].(float64) <= 0 || m["disk_total"].(float64) <= 0 || m["cpu_count"].(float64) < 1 {
		t.Errorf("implausible metrics %v", m)
	}
	res, _ = http.Get(h.url + "/envs")
	var env map[string]string
	_ = json.NewDecoder(res.Body).Decode(&env)
	if env["K"] != "v" {
		t.Errorf("/envs = %v", env)
	}
	res, _ = http.Post(h.url+"/init", "application/json", strings.NewReader("{not json"))
	if res.StatusCode != http.StatusBadRequest {
		t.Errorf("bad /init body: %d", res.StatusCode)
	}
}

func TestOversizedAndMalformedMessagesGetClearErrors(t *testing.T) {
	t.Parallel()
	h := start(t)
	big := strings.Repeat("x", 2<<20) // over the 1 MiB limit of the harness
	_, err := h.client().SendInput(context.Background(), connect.NewRequest(&pb.SendInputRequest{
		Input: &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte(big)}}}))
	if connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Errorf("oversized message: %v", err)
	}
	for name, body := range map[string]string{
		"truncated envelope": "\x00\x00\x00\x00\x10abc",
		"garbage json":       "\x00\x00\x00\x00\x03{{{",
		"empty":              "",
	} {
		res, err := http.Post(h.url+"/process.Process/Start", "application/connect+json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode >= 500 && res.StatusCode != 200 {
			t.Errorf("%s: status %d %s", name, res.StatusCode, b)
		}
		if !bytes.Contains(b, []byte(`"code":"`)) || !bytes.Contains(b, []byte("(request id ")) {
			t.Errorf("%s: no error code in %q", name, b)
		}
	}
}

func postInit(url, body string) error {
	res, err := http.Post(url+"/init", "application/json", strings.NewReader(body))
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusNoContent {
		b, _ := io.ReadAll(res.Body)
		return errors.New(res.Status + ": " + string(b))
	}
	return nil
}

// TestRunningProcessesDoNotHoldAThreadEach: outside PID 1 mode each process's exit is
// watched through a pidfd in the runtime's poller, not by a thread blocked in wait4.
// Not parallel: the thread count is the whole test binary's.
func TestRunningProcessesDoNotHoldAThreadEach(t *testing.T) {
	h := start(t)
	const n = 64
	before := threads(t)
	var started, ended sync.WaitGroup
	results := make(chan result, n)
	for range n {
		started.Add(1)
		ended.Add(1)
		go func() {
			defer ended.Done()
			stream, err := h.client().Start(context.Background(), connect.NewRequest(bash("sleep 1")))
			if err != nil {
				started.Done()
				results <- result{err: err}
				return
			}
			if !stream.Receive() { // the start event: the process is running
				started.Done()
				results <- result{err: stream.Err()}
				return
			}
			started.Done()
			results <- collect[*pb.StartResponse](stream)
		}()
	}
	started.Wait()
	during := threads(t)
	ended.Wait()
	close(results)
	for r := range results {
		if r.err != nil || r.end == nil || r.end.ExitCode != 0 || r.end.Status != "exit status 0" {
			t.Errorf("sleep 1: end %v, err %v", r.end, r.err)
		}
	}
	t.Logf("threads: %d before, %d with %d processes running", before, during, n)
	if during-before >= n/2 {
		t.Errorf("%d processes running took %d more threads", n, during-before)
	}
}

func threads(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Skip("no Threads in /proc/self/status")
	return 0
}
