package server

import (
	"context"
	"fmt"

	"github.com/cove-dev/cove/internal/control/orchestrator"
)

// StopAction is what stopping the server does to its sandboxes.
type StopAction string

const (
	// StopKeep leaves every sandbox running (frozen ones frozen) for the next start on the
	// same data dir to adopt: an upgrade or restart kills no one.
	StopKeep StopAction = "keep"
	// StopKill kills every sandbox with reason server_shutdown.
	StopKill StopAction = "kill"
)

// String never returns "": the zero value is StopKeep.
func (a StopAction) String() string {
	if a == "" {
		return string(StopKeep)
	}
	return string(a)
}

// ParseStopAction reads keep or kill.
func ParseStopAction(s string) (StopAction, error) {
	switch a := StopAction(s); a {
	case StopKeep, StopKill:
		return a, nil
	}
	return "", fmt.Errorf("stop action %q: want keep or kill", s)
}

func stop(ctx context.Context, orch *orchestrator.Orchestrator, a StopAction) {
	if a == StopKill {
		orch.Shutdown(ctx) // kills sandboxes (server_shutdown)
		return
	}
	orch.Detach(ctx)
}
