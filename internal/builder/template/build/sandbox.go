package build

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cove-dev/cove/internal/builder/template/build/oci"
)

// StepNetwork is the network a build's RUN steps reach the world through: for a team's
// build, the server's network manager under the team's egress policy. Attach gives the step
// id a pinned network namespace to join and a resolv.conf to mount on its /etc/resolv.conf
// (both "" for a namespace with only loopback); Detach removes them once the step's
// processes are gone, first reporting the connections the network refused the step that
// it has not reported yet (Builder.StepLog takes them into the build's log while the step is
// attached). String says what the network lets through, for the build's log.
type StepNetwork interface {
	Attach(ctx context.Context, id string) (netns, resolvConf string, err error)
	Detach(ctx context.Context, id string) error
	String() string
}

// Loopback is the StepNetwork of no way out: each step gets a namespace of its own with only
// loopback (a server without networking builds its teams' templates this way).
var Loopback StepNetwork = loopback{}

type loopback struct{}

func (loopback) Attach(context.Context, string) (string, string, error) { return "", "", nil }
func (loopback) Detach(context.Context, string) error                   { return nil }
func (loopback) String() string                                         { return "no network but loopback" }

// Sandbox is how the steps of a team's build are confined, as the team's sandboxes are.
type Sandbox struct {
	// Network returns the network of team's build steps, each running with cpus and
	// memoryMB (what Limits gave); nil, or a nil result, is Loopback.
	Network func(team string, cpus, memoryMB int) StepNetwork
	// Limits returns the CPUs and memory a step of team's build runs with, given what the
	// build asked for (0: not asked), or an error wrapping ErrInvalid that names the field
	// over the team's limit.
	Limits func(team string, cpuCount, memoryMB int) (cpus, memory int, err error)
	// DiskSizeMB is the disk each RUN step writes its changes into, as a sandbox's disk: a
	// write past it gets ENOSPC and fails the build. 0: the store's disk, unbounded.
	DiskSizeMB int
	// BuildTimeout bounds a whole build, from its first step to its publish: a build still
	// running then is cancelled, its running step killed, and it fails with a
	// *BuildTimeLimitError. 0: no limit.
	BuildTimeout time.Duration
	// OnTimeLimit is told of each build of team that ran past BuildTimeout, with why it
	// failed (the server's team.limit.reached); nil tells nobody.
	OnTimeLimit func(team, why string)
	// Pull returns where team's fromImage pulls may connect (the server's egress limit, the
	// team's egress policy, the registries the operator allows); nil, the zero oci.Guard.
	Pull func(team string) oci.Guard
}

// pullGuard is where team's pulls may connect.
func (b *Builds) pullGuard(team string) oci.Guard {
	if b.sandbox.Pull == nil {
		return oci.Guard{}
	}
	return b.sandbox.Pull(team)
}

// SetSandbox confines the builds asked for over the API from now on: their RUN steps run
// in sb's network and under its limits instead of the host's network. Call it before the
// first build starts.
func (b *Builds) SetSandbox(sb Sandbox) { b.sandbox = sb }

// stepSandbox is the network and limits of r's steps.
func (b *Builds) stepSandbox(r *BuildRecord) (StepNetwork, int, int, error) {
	cpus, mem := r.CPUCount, r.MemoryMB
	if b.sandbox.Limits != nil {
		var err error
		if cpus, mem, err = b.sandbox.Limits(r.TeamID, r.CPUCount, r.MemoryMB); err != nil {
			return nil, 0, 0, fmt.Errorf("build %s: %w", r.ID, err)
		}
	}
	net := Loopback
	if b.sandbox.Network != nil {
		if n := b.sandbox.Network(r.TeamID, cpus, mem); n != nil {
			net = n
		}
	}
	return net, cpus, mem, nil
}

// BuildStep is a RUN step of a build as its network sees it: ID is the id the step attached
// to its StepNetwork with, the others say whose build it is (BuildID "" for a build an
// operator ran on the host).
type BuildStep struct {
	ID, BuildID, TeamID, Template string
}

// runningStep is a RUN step attached to a StepNetwork, and its build's log.
type runningStep struct {
	step BuildStep
	out  *lineWriter
}

// StepLog writes line to the log of the build whose RUN step attached to its network as id
// (between Attach and Detach), so that what the network did to the step (a refused
// connection) shows among the step's own output. It reports false when no step is id.
func (s *Builder) StepLog(id, line string) (BuildStep, bool) {
	v, ok := s.steps.Load(id)
	if !ok {
		return BuildStep{}, false
	}
	r := v.(*runningStep)
	r.out.Printf("==> network: %s", line)
	return r.step, true
}

// BuildTimeLimitError is why a build that ran past Sandbox.BuildTimeout failed.
type BuildTimeLimitError struct {
	Limit time.Duration
}

func (e *BuildTimeLimitError) Error() string {
	return fmt.Sprintf("build killed: it ran past the build time limit of %s (--build-timeout)", e.Limit)
}

// timeLimited bounds ctx by the builds' time limit, if they have one.
func (b *Builds) timeLimited(ctx context.Context) (context.Context, context.CancelFunc) {
	if d := b.sandbox.BuildTimeout; d > 0 {
		return context.WithTimeoutCause(ctx, d, &BuildTimeLimitError{Limit: d})
	}
	return ctx, func() {}
}

// timeLimitReason makes err, which ended a build whose context is ctx, say the build ran
// past its time limit when that is why it ended, keeping the step it ended in.
func timeLimitReason(ctx context.Context, err error) error {
	var tl *BuildTimeLimitError
	if err == nil || !errors.As(context.Cause(ctx), &tl) || errors.As(err, &tl) {
		return err
	}
	var se *StepError
	if errors.As(err, &se) {
		return &StepError{Index: se.Index, Step: se.Step, Err: tl}
	}
	return tl
}
