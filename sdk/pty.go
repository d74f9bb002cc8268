package cove

import (
	"context"
	"maps"

	"connectrpc.com/connect"

	pb "github.com/cove-dev/cove/sdk/gen/process"
)

// PTY runs interactive terminals in the sandbox.
type PTY struct{ e *envd }

// PTYSize is a terminal's size in characters.
type PTYSize struct{ Cols, Rows uint32 }

// Create starts an interactive login bash on a terminal of the given size and returns
// once it runs. Its output reaches OnPTYData; the handle's Wait, Kill and Disconnect work
// as for commands.
//
// Options: OnPTYData, Envs, Cwd, User, Timeout (DefaultCommandTimeout unless given), Tag,
// Command.
func (p *PTY) Create(ctx context.Context, size PTYSize, opts ...Option) (*CommandHandle, error) {
	o := apply(opts)
	envs := map[string]string{"TERM": "xterm-256color", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
	maps.Copy(envs, o.envs)
	args := []string{"-i", "-l"}
	if o.command != "" {
		args = []string{"-l", "-c", o.command}
	}
	req := &pb.StartRequest{
		Process: &pb.ProcessConfig{Cmd: "/bin/bash", Args: args, Envs: envs},
		Pty:     &pb.PTY{Size: &pb.PTY_Size{Cols: size.Cols, Rows: size.Rows}},
	}
	if o.cwd != "" {
		req.Process.Cwd = &o.cwd
	}
	if o.tag != "" {
		req.Tag = &o.tag
	}
	return p.e.start(ctx, req, o)
}

// SendInput types data into the terminal.
func (p *PTY) SendInput(ctx context.Context, pid uint32, data []byte) error {
	return p.e.sendInput(ctx, pid, &pb.ProcessInput{Input: &pb.ProcessInput_Pty{Pty: data}})
}

// Resize changes the terminal's size.
func (p *PTY) Resize(ctx context.Context, pid uint32, size PTYSize) error {
	_, _, err := unary(ctx, p.e, "resize terminal", "", func(ctx context.Context) (*connect.Response[pb.UpdateResponse], error) {
		return p.e.proc.Update(ctx, connect.NewRequest(&pb.UpdateRequest{
			Process: pidSelector(pid),
			Pty:     &pb.PTY{Size: &pb.PTY_Size{Cols: size.Cols, Rows: size.Rows}},
		}))
	})
	return err
}

// Kill kills the terminal's shell and everything it started.
func (p *PTY) Kill(ctx context.Context, pid uint32) error {
	return p.e.signal(ctx, pid, pb.Signal_SIGNAL_SIGKILL)
}
