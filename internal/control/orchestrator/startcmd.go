package orchestrator

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/sdk/gen/process"
	"github.com/cove-dev/cove/sdk/gen/process/processconnect"
)

// readyTimeout bounds how long a create waits for a template's ready check to pass.
const readyTimeout = 60 * time.Second

// startTemplateCmd starts a template's start command in a new sandbox (it keeps running,
// tagged "start") and waits until the ready check exits 0, as E2B does before a sandbox made
// from the template is handed out.
func startTemplateCmd(ctx context.Context, c *http.Client, token, user, cwd, startCmd, readyCmd string) error {
	return startTemplateCmdLogged(ctx, c, token, user, cwd, startCmd, readyCmd, nil)
}

// startTemplateCmdLogged is startTemplateCmd that, when out is not nil, also gives out the
// start command's output lines until the ready check passes (a build's log shows them).
func startTemplateCmdLogged(ctx context.Context, c *http.Client, token, user, cwd, startCmd, readyCmd string, out func(string)) error {
	client := processconnect.NewProcessClient(c, "http://envd")
	var following sync.WaitGroup
	defer following.Wait()
	followCtx, stopFollowing := context.WithCancel(ctx) // ends the output's stream, not the process
	defer stopFollowing()
	run := func(ctx context.Context, cmd, tag string, wait bool) (int32, error) {
		cfg := &process.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", cmd}}
		if cwd != "" {
			cfg.Cwd = proto.String(cwd)
		}
		req := connect.NewRequest(&process.StartRequest{Process: cfg, Stdin: proto.Bool(false)})
		if tag != "" {
			req.Msg.Tag = proto.String(tag)
		}
		if user != "" {
			req.Header().Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":")))
		}
		if token != "" {
			req.Header().Set("X-Access-Token", token)
		}
		if id := telemetry.RequestID(ctx); id != "" {
			req.Header().Set(telemetry.HeaderRequestID, id)
		}
		if !wait && out != nil {
			ctx = followCtx
		}
		stream, err := client.Start(ctx, req)
		if err != nil {
			return 0, err
		}
		closeStream := true
		defer func() {
			if closeStream {
				stream.Close()
			}
		}()
		for stream.Receive() {
			ev := stream.Msg().GetEvent()
			if ev.GetStart() != nil && !wait && out != nil {
				closeStream = false
				following.Add(1)
				go func() {
					defer following.Done()
					defer stream.Close()
					followOutput(stream, out)
				}()
				return 0, nil
			}
			if ev.GetStart() != nil && !wait {
				return 0, nil // the process outlives its stream
			}
			if end := ev.GetEnd(); end != nil {
				return end.GetExitCode(), nil
			}
		}
		if err := stream.Err(); err != nil {
			return 0, err
		}
		return 0, errors.New("the stream ended before the process did")
	}
	if startCmd != "" {
		if _, err := run(ctx, startCmd, "start", false); err != nil {
			return fmt.Errorf("start command: %w", err)
		}
	}
	if readyCmd == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		code, err := run(ctx, readyCmd, "", true)
		if err == nil && code == 0 {
			stopFollowing()
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("ready check %q did not pass within %s (last exit code %d, error %v)", readyCmd, readyTimeout, code, err)
		case <-tick.C:
		}
	}
}

// followOutput gives out the lines of the process's output on stream until it ends.
func followOutput(stream *connect.ServerStreamForClient[process.StartResponse], out func(string)) {
	var partial [2][]byte // stdout's and stderr's unfinished lines
	for stream.Receive() {
		d := stream.Msg().GetEvent().GetData()
		if d == nil {
			continue
		}
		for i, b := range [][]byte{d.GetStdout(), d.GetStderr()} {
			partial[i] = append(partial[i], b...)
			for {
				line, rest, ok := bytes.Cut(partial[i], []byte("\n"))
				if !ok {
					break
				}
				out(string(line))
				partial[i] = rest
			}
		}
	}
	for _, p := range partial {
		if len(p) > 0 {
			out(string(p))
		}
	}
}
