package runtime

import (
	"fmt"

	"github.com/cove-dev/cove/internal/errdefs"
)

// Engine is the OCI runtime that isolates a sandbox: runc (namespaces and cgroups around the
// host's kernel) or gVisor's runsc (an application kernel, the sentry, between the sandbox
// and the host's kernel). One Runc drives both, chosen per sandbox (Spec.Engine).
type Engine string

// The engines.
const (
	// EngineRunc runs the sandbox on the host's kernel, in namespaces and cgroups.
	EngineRunc Engine = "runc"
	// EngineRunsc runs the sandbox on gVisor's sentry (systrap platform), with the host's
	// network stack inside the sandbox's own network namespace (runsc --network=host).
	EngineRunsc Engine = "runsc"
)

func (e Engine) String() string {
	if e == "" {
		return string(EngineRunc)
	}
	return string(e)
}

// ParseEngine returns the engine named s; "" is runc.
func ParseEngine(s string) (Engine, error) {
	switch e := Engine(s); e {
	case "":
		return EngineRunc, nil
	case EngineRunc, EngineRunsc:
		return e, nil
	}
	return "", fmt.Errorf("%w: unknown runtime engine %q (want runc or runsc)", ErrInvalid, s)
}

// ErrUnsupported: this host, or this engine, cannot do what was asked (such as an engine
// whose binary is missing). The API answers it 400, its message naming the engine.
var ErrUnsupported = errdefs.New(errdefs.ErrInvalidArgument, "not supported")
