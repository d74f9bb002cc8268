// Package netpolicy is the sandboxes' egress policy as the REST edge and the network ask for
// it: read and replace a live sandbox's policy (E2B's GET and PUT of its network), and record
// the connections the network refused it. The network (internal/sandbox/network) enforces the
// policy; the sandboxes are the orchestrator's, which this package knows only through
// Sandboxes, handed at construction. Attaching a sandbox's network at its launch, detaching
// it at its end and reclaiming it after a restart stay in the orchestrator.
package netpolicy

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/cove-dev/cove/internal/errdefs"
	"github.com/cove-dev/cove/internal/observe/events"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/sandbox/egress"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/sdk/requestid"
)

// ErrConflict is a policy this server cannot keep (it gives sandboxes no network).
var ErrConflict = errdefs.New(errdefs.ErrConflict, "conflict")

// Network reads and replaces the policy a sandbox's network enforces (network.Manager).
type Network interface {
	Update(ctx context.Context, id string, p egress.Policy) error
	Policy(id string) (egress.Policy, bool)
}

// Sandboxes is what the policy needs of the running sandboxes (the orchestrator).
type Sandboxes interface {
	// LiveSandbox returns a copy of a live sandbox of team (any team when teamID is ""),
	// or the error a client gets for one that is gone or was never theirs.
	LiveSandbox(ctx context.Context, teamID, id string) (*store.Sandbox, error)
	// LocalSandbox returns a copy of sandbox id when it runs on this server, nil otherwise
	// (no record is read: the network's refusals come often).
	LocalSandbox(id string) *store.Sandbox
	// ChangeNetwork runs change on a live sandbox of team under its lock, so a kill waits
	// for it and a killed sandbox is refused; then masks secrets in what is collected from
	// it and records allowInternet on its record.
	ChangeNetwork(ctx context.Context, teamID, id string, allowInternet bool, secrets []string, change func(sb *store.Sandbox) error) error
	// PortOptions says how the proxy reaches a live sandbox's ports; TrafficToken is the
	// token they require ("" when public).
	PortOptions(id string) (string, []int)
	TrafficToken(id string) string
}

// Config is what a Service is built of.
type Config struct {
	// Network enforces the policies; nil: sandboxes have no network and no policy.
	Network   Network
	Sandboxes Sandboxes
	// Events records network.denied; nil records nothing.
	Events events.Emitter
	// Logger logs the refusals, which come from no request.
	Logger *slog.Logger
}

// Service serves the sandboxes' egress policies.
type Service struct{ cfg Config }

// New returns the service of cfg's network.
func New(cfg Config) *Service { return &Service{cfg: cfg} }

// sandboxLog is ctx logging as sandbox sb's.
func sandboxLog(ctx context.Context, sb *store.Sandbox) context.Context {
	return telemetry.With(ctx, telemetry.KeySandboxID, sb.ID, telemetry.KeyTeamID, sb.TeamID, telemetry.KeyTemplateID, sb.TemplateID)
}

// NetworkPolicy is the egress policy of a live sandbox of the team; false when the server
// gives sandboxes no network or the sandbox is not live.
func (s *Service) NetworkPolicy(ctx context.Context, teamID, id string) (egress.Policy, bool) {
	if s.cfg.Network == nil {
		return egress.Policy{}, false
	}
	sb, err := s.cfg.Sandboxes.LiveSandbox(ctx, teamID, id)
	if err != nil {
		return egress.Policy{}, false
	}
	return s.cfg.Network.Policy(sb.ID)
}

// UpdateNetwork replaces a live sandbox's egress policy, atomically: E2B's
// PUT /sandboxes/{id}/network. It takes effect on open connections' next packets.
func (s *Service) UpdateNetwork(ctx context.Context, teamID, id string, p egress.Policy) error {
	begun := time.Now()
	if s.cfg.Network == nil {
		return fmt.Errorf("%w: this server gives sandboxes no network (cove server --network=false)", ErrConflict)
	}
	var changed *store.Sandbox
	err := s.cfg.Sandboxes.ChangeNetwork(ctx, teamID, id, p.AllowInternet, p.Secrets(), func(sb *store.Sandbox) error {
		changed = sb
		p.Team = sb.TeamID
		if err := s.cfg.Network.Update(sandboxLog(ctx, sb), sb.ID, p); err != nil {
			return fmt.Errorf("update network of %s: %w", id, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	telemetry.Logger(sandboxLog(ctx, changed)).Info("sandbox network updated", telemetry.KeyAllowInternetAccess, p.AllowInternet,
		telemetry.KeyNetworkAllowOut, len(p.AllowOut)+len(p.AllowHosts), telemetry.KeyNetworkDenyOut, len(p.DenyOut), telemetry.KeyDurationMS, time.Since(begun).Milliseconds())
	return nil
}

// NetworkDenied records a sample of the connections the network refused a live sandbox: a
// log line and a network.denied event naming the destination, the port and the rule.
func (s *Service) NetworkDenied(ctx context.Context, d egress.Denied) {
	sb := s.cfg.Sandboxes.LocalSandbox(d.SandboxID)
	if sb == nil {
		return
	}
	ctx = sandboxLog(telemetry.WithRequestID(telemetry.WithLogger(ctx, s.cfg.Logger), requestid.System), sb)
	log := telemetry.Logger(ctx)
	log.Info("network connection denied", telemetry.KeyNetworkDestination, d.Dst.Addr().String(), telemetry.KeyNetworkPort, d.Dst.Port(),
		telemetry.KeyNetworkProtocol, d.Proto, telemetry.KeyNetworkRule, d.Rule, telemetry.KeyNetworkDenyKind, d.Kind.String(), telemetry.KeyNetworkPackets, d.Count)
	s.emit(ctx, events.SandboxNetworkDenied, sb, events.NetworkDeniedData(d.Dst.Addr().String(), int(d.Dst.Port()), d.Proto, d.Rule, d.Kind.String(), d.Count, d.First))
}

// emit records event t of sandbox sb with its payload data, as the orchestrator's emit does
// (the shape internal/observe/events/emitsites_test.go reads every emit site in).
func (s *Service) emit(ctx context.Context, t events.EventType, sb *store.Sandbox, data any) {
	if s.cfg.Events == nil {
		return
	}
	ev := events.ForSandbox(t, sb)
	ev.Data = data
	events.EmitOrWarn(ctx, s.cfg.Events, ev, telemetry.Logger(ctx))
}

// PortOptions says how the proxy reaches a live sandbox's ports: the Host header to send
// and the ports that serve HTTPS.
func (s *Service) PortOptions(id string) (string, []int) { return s.cfg.Sandboxes.PortOptions(id) }

// TrafficToken is the token a live sandbox's ports require; "" when they are public.
func (s *Service) TrafficToken(id string) string { return s.cfg.Sandboxes.TrafficToken(id) }
