package orchestrator

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/cove-dev/cove/gen/process"
	"github.com/cove-dev/cove/gen/process/processconnect"
	"github.com/cove-dev/cove/internal/telemetry"
)

// readyTimeout bounds how long a create waits for a template's ready check to pass.
const readyTimeout = 60 * time.Second

// startTemplateCmd starts a template's start command in a new sandbox (it keeps running,
// tagged "start") and waits until the ready check exits 0, as E2B does before a sandbox made
// from the template is handed out.
func startTemplateCmd(ctx context.Context, c *http.Client, token, user, cwd, startCmd, readyCmd string) error {
	client := processconnect.NewProcessClient(c, "http://envd")
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
		stream, err := client.Start(ctx, req)
		if err != nil {
			return 0, err
		}
		defer stream.Close()
		for stream.Receive() {
			ev := stream.Msg().GetEvent()
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
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("ready check %q did not pass within %s (last exit code %d, error %v)", readyCmd, readyTimeout, code, err)
		case <-tick.C:
		}
	}
}
