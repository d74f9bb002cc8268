package server

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/cove-dev/cove/internal/builder/template"
	"github.com/cove-dev/cove/internal/builder/template/build"
	"github.com/cove-dev/cove/internal/builder/template/build/oci"
	"github.com/cove-dev/cove/internal/control/orchestrator"
	"github.com/cove-dev/cove/internal/observe/events"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/sandbox/egress"
	"github.com/cove-dev/cove/internal/store"
)

// buildSandbox confines the steps of a team's template build as the team's sandboxes are:
// in a network of the server's network manager under the team's egress policy (loopback
// only when the server gives sandboxes no network), never the host's, and with the CPUs and
// memory the build asked for (a sandbox's defaults when it did not), within the team's quota,
// and each step's writes on a disk of a sandbox's size. Each running step counts as one of
// the team's sandboxes and is killed past the step time limit (g).
func buildSandbox(cfg Config, netw orchestrator.Network, g stepGuard) build.Sandbox {
	return build.Sandbox{
		DiskSizeMB:   cmp.Or(cfg.DiskSizeMB, 1024), // the orchestrator's default
		BuildTimeout: cfg.BuildTimeout,
		Pull: func(team string) oci.Guard {
			return oci.Guard{Registries: cfg.RegistryAllow, Limit: cfg.Network.EgressLimit, Allows: pullPolicy(cfg.Quotas.For(team).Egress, team)}
		},
		Network: func(team string, cpus, memoryMB int) build.StepNetwork {
			var n build.StepNetwork = build.Loopback
			if netw != nil {
				n = teamNetwork{netw: netw, egress: cfg.Quotas.For(team).Egress, team: team}
			}
			if g.reserve == nil && g.timeout <= 0 {
				return n
			}
			return &guardedSteps{StepNetwork: n, team: team, cpus: cpus, memoryMB: memoryMB, guard: g, held: map[string]heldStep{}}
		},
		Limits: func(team string, cpus, memoryMB int) (int, int, error) {
			q := cfg.Quotas.For(team)
			if q.VCPUs > 0 && cpus > q.VCPUs {
				return 0, 0, fmt.Errorf("%w: cpuCount %d is over the team's limit of %d vCPUs", template.ErrInvalid, cpus, q.VCPUs)
			}
			if q.MemoryMB > 0 && memoryMB > q.MemoryMB {
				return 0, 0, fmt.Errorf("%w: memoryMB %d is over the team's limit of %d MB", template.ErrInvalid, memoryMB, q.MemoryMB)
			}
			cpus, memoryMB = cmp.Or(cpus, 2), cmp.Or(memoryMB, cfg.SandboxMemoryMB, 512) // the orchestrator's defaults
			if q.VCPUs > 0 {
				cpus = min(cpus, q.VCPUs)
			}
			if q.MemoryMB > 0 {
				memoryMB = min(memoryMB, q.MemoryMB)
			}
			return cpus, memoryMB, nil
		},
	}
}

// stepGuard bounds a team's build steps: reserve counts a running step, with its CPUs and
// memory, as one of the team's sandboxes (orchestrator.ReserveBuildStep), and a step still running after timeout is told
// why in its log (note) and killed (kill: the runtime's Destroy). A zero field bounds nothing.
type stepGuard struct {
	reserve func(team, id string, cpus, memoryMB int) (release func(), err error)
	timeout time.Duration
	note    func(id, line string)
	kill    func(ctx context.Context, id string) error
	// limit tells the team (team.limit.reached); nil tells nobody.
	limit  func(ctx context.Context, team, detail string)
	logger *slog.Logger
}

// guardedSteps is a team's step network that also holds each step's place in the team's
// quota and its time limit, from Attach (before the step's container is made) to Detach
// (once it is gone).
type guardedSteps struct {
	build.StepNetwork
	team           string
	cpus, memoryMB int // each step's size, charged against the team's quota
	guard          stepGuard

	mu   sync.Mutex
	held map[string]heldStep
}

type heldStep struct {
	release func()
	timer   *time.Timer
}

func (g *guardedSteps) Attach(ctx context.Context, id string) (string, string, error) {
	release := func() {}
	if g.guard.reserve != nil && g.team != "" {
		r, err := g.guard.reserve(g.team, id, g.cpus, g.memoryMB)
		if err != nil {
			return "", "", fmt.Errorf("build step of team %s: %w", g.team, err)
		}
		release = r
	}
	netns, resolv, err := g.StepNetwork.Attach(ctx, id)
	if err != nil {
		release()
		return "", "", err
	}
	h := heldStep{release: release}
	if d := g.guard.timeout; d > 0 && g.guard.kill != nil {
		h.timer = time.AfterFunc(d, func() { g.expire(context.WithoutCancel(ctx), id, d) })
	}
	g.mu.Lock()
	g.held[id] = h
	g.mu.Unlock()
	return netns, resolv, nil
}

// expire kills step id, which ran past d, saying so in its log and the server's.
func (g *guardedSteps) expire(ctx context.Context, id string, d time.Duration) {
	why := fmt.Sprintf("build step killed: it ran past the step time limit of %s (--build-step-timeout)", d)
	if g.guard.note != nil {
		g.guard.note(id, why)
	}
	logger := cmp.Or(g.guard.logger, telemetry.Logger(ctx))
	logger.Warn("build step killed: time limit", telemetry.KeySandboxID, id, telemetry.KeyTeamID, g.team, telemetry.KeyDurationMS, d.Milliseconds())
	if g.guard.limit != nil {
		g.guard.limit(ctx, g.team, why)
	}
	if err := g.guard.kill(ctx, id); err != nil {
		logger.Error("build step kill failed", telemetry.KeySandboxID, id, telemetry.KeyError, err.Error())
	}
}

func (g *guardedSteps) Detach(ctx context.Context, id string) error {
	g.mu.Lock()
	h, ok := g.held[id]
	delete(g.held, id)
	g.mu.Unlock()
	if ok {
		if h.timer != nil {
			h.timer.Stop()
		}
		defer h.release()
	}
	return g.StepNetwork.Detach(ctx, id)
}

// pullPolicy is the team's egress policy for its fromImage pulls: an address allowOut names
// (or a host it names) is allowed, else the internet minus denyOut when internet access is on.
func pullPolicy(e *orchestrator.Egress, team string) func(host string, addr netip.Addr) bool {
	return func(host string, addr netip.Addr) bool {
		p, err := e.Policy(team)
		if err != nil {
			return false
		}
		in := func(ps []netip.Prefix) bool {
			return slices.ContainsFunc(ps, func(q netip.Prefix) bool { return q.Contains(addr) })
		}
		if in(p.AllowOut) || p.AllowsHost(host) {
			return true
		}
		return p.AllowInternet && !in(p.DenyOut)
	}
}

// teamNetwork attaches build steps to the network manager under the team's egress policy.
type teamNetwork struct {
	netw   orchestrator.Network
	egress *orchestrator.Egress
	team   string
}

func (n teamNetwork) Attach(ctx context.Context, id string) (string, string, error) {
	p, err := n.egress.Policy(n.team)
	if err != nil {
		return "", "", err
	}
	att, err := n.netw.Attach(ctx, id, p)
	if err != nil {
		return "", "", err
	}
	return att.Netns, att.ResolvConf, nil
}

// Detach reports the connections the step's network refused and not yet reported (into
// the build's log, see buildDenied), then removes the network.
func (n teamNetwork) Detach(ctx context.Context, id string) error {
	if f, ok := n.netw.(deniedFlusher); ok {
		f.FlushDenied(ctx, id)
	}
	return n.netw.Detach(ctx, id)
}

// deniedFlusher is the network manager's FlushDenied.
type deniedFlusher interface {
	FlushDenied(ctx context.Context, id string)
}

func (n teamNetwork) String() string {
	if n.egress == nil {
		return "the internet (the team's network: no egress rules)"
	}
	p, err := n.egress.Policy(n.team)
	if err != nil {
		return "the team's network: " + err.Error()
	}
	return fmt.Sprintf("the team's network: internet %v, allow out %v, deny out %v", p.AllowInternet, p.AllowOutStrings(), egress.Strings(p.DenyOut))
}

// buildDenied records a sample of the connections the network refused a template build's
// RUN step, as the orchestrator does a sandbox's: a line in the build's log (so a failing
// step explains itself), a log line and a network.denied event naming the build. It reports
// false when d is not a build step's.
func buildDenied(ctx context.Context, templates *build.Builder, bus *events.Bus, logger *slog.Logger, d egress.Denied) bool {
	data := events.NetworkDeniedData(d.Dst.Addr().String(), int(d.Dst.Port()), d.Proto, d.Rule, d.Kind.String(), d.Count, d.First)
	step, ok := templates.StepLog(d.SandboxID, data.String())
	if !ok {
		return false
	}
	data.BuildID = step.BuildID
	ctx = telemetry.With(telemetry.WithRequestID(telemetry.WithLogger(ctx, logger), orchestrator.SystemRequestID),
		telemetry.KeySandboxID, step.ID, telemetry.KeyBuildID, step.BuildID, telemetry.KeyTeamID, step.TeamID, telemetry.KeyTemplateID, step.Template)
	telemetry.Logger(ctx).Info("network connection denied", telemetry.KeyNetworkDestination, data.Destination, telemetry.KeyNetworkPort, data.Port,
		telemetry.KeyNetworkProtocol, d.Proto, telemetry.KeyNetworkRule, d.Rule, telemetry.KeyNetworkDenyKind, data.DenyKind, telemetry.KeyNetworkPackets, d.Count)
	if step.TeamID != "" {
		// Under the build's id, as its log lines are: GET /events/sandboxes/{buildID} lists them.
		ev := events.Event{Type: events.SandboxNetworkDenied, SandboxID: cmp.Or(step.BuildID, step.ID), TemplateID: step.Template, TeamID: step.TeamID, Data: data}
		if err := bus.Emit(ctx, ev); err != nil {
			telemetry.Logger(ctx).Warn("event not recorded", telemetry.KeyError, err.Error())
		}
	}
	return true
}

// keptFiles is a set of files the templates keep (build records, uploads, build logs).
type keptFiles interface {
	Kept() (template.Kept, error)
	PruneBefore(before time.Time, batch int) (int64, error)
	PruneOverCap(maxRows int64, batch int) (int64, error)
}

// buildFiles is a set of the templates' files as retention sees a dataset.
type buildFiles struct{ files keptFiles }

func (f buildFiles) Usage(_ context.Context, _ store.Dataset, _ bool) (store.Usage, error) {
	k, err := f.files.Kept()
	return store.Usage{Rows: k.Count, Bytes: k.Bytes, Oldest: k.Oldest}, err
}

func (f buildFiles) PruneBefore(_ context.Context, _ store.Dataset, before time.Time, batch int) (int64, error) {
	return f.files.PruneBefore(before, batch)
}

func (f buildFiles) PruneOverCap(_ context.Context, _ store.Dataset, maxRows int64, batch int) (int64, error) {
	return f.files.PruneOverCap(maxRows, batch)
}

// buildRetention gives retention the builds' records and uploads and the templates' build logs.
func buildRetention(b *build.Builds, t *template.Store) map[store.Dataset]store.RetentionStore {
	return map[store.Dataset]store.RetentionStore{
		store.DatasetBuilds:    buildFiles{b.Records()},
		store.DatasetUploads:   buildFiles{b.UploadFiles()},
		store.DatasetBuildLogs: buildFiles{t.BuildLogs()},
	}
}
