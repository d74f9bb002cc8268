package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/sandbox/egress"
	"github.com/cove-dev/cove/internal/sandbox/network"
	"github.com/cove-dev/cove/internal/sandbox/runtime"
	"github.com/cove-dev/cove/internal/store"
)

// Network gives sandboxes a way out (network.Manager in cove server). Without one every
// sandbox has a loopback-only network and reports allowInternetAccess false.
type Network interface {
	Attach(ctx context.Context, id string, p egress.Policy) (*network.Attachment, error)
	Update(ctx context.Context, id string, p egress.Policy) error
	Policy(id string) (egress.Policy, bool)
	Detach(ctx context.Context, id string) error
	// TrustBundle writes the sandbox's CA bundle: the template's with Cove's egress CA.
	TrustBundle(id string, templateBundle []byte) (string, error)
	// SetInbound records how the proxy reaches the sandbox's ports beside its network, and
	// Inbound reads it back, after a restart too.
	SetInbound(id string, in network.Inbound) error
	Inbound(id string) (network.Inbound, bool)
	// Reclaim gives an adopted sandbox the network an earlier server recorded for it (its
	// namespace, address, rules and inbound settings); network.ErrNotAttached if none.
	Reclaim(ctx context.Context, id string) (*network.Attachment, error)
	// DropUnclaimed removes the recorded networks no adopted sandbox re-claimed.
	DropUnclaimed(ctx context.Context) error
}

// caBundle is where Debian-based templates keep the trusted CAs (OpenSSL's default file).
const caBundle = "/etc/ssl/certs/ca-certificates.crt"

// attachNetwork puts the sandbox on its network before the runtime creates it: the spec
// joins the namespace the network made and gets its resolv.conf. It records whether the
// sandbox really has internet access, so getInfo tells the truth.
func (o *Orchestrator) attachNetwork(ctx context.Context, sb *store.Sandbox, req CreateRequest, spec *runtime.Spec) (context.Context, error) {
	sb.AllowInternet = false
	if o.cfg.Network == nil {
		return ctx, nil
	}
	p := egress.Policy{}
	if req.Network != nil {
		p = *req.Network
	}
	p.AllowInternet, p.Team = req.AllowInternet, sb.TeamID
	att, err := o.cfg.Network.Attach(ctx, sb.ID, p)
	if err != nil {
		return ctx, err
	}
	spec.Netns = att.Netns
	spec.Binds = append(spec.Binds, runtime.Bind{Source: att.ResolvConf, Target: "/etc/resolv.conf", ReadOnly: true})
	// Cove's egress CA is trusted in every sandbox, so header rules work on HTTPS (also
	// when an update adds them later).
	tmplBundle, _ := os.ReadFile(filepath.Join(spec.Rootfs, caBundle))
	bundle, err := o.cfg.Network.TrustBundle(sb.ID, tmplBundle)
	if err != nil {
		return ctx, err
	}
	spec.Binds = append(spec.Binds, runtime.Bind{Source: bundle, Target: caBundle, ReadOnly: true})
	if in := (network.Inbound{TrafficToken: req.trafficToken, MaskRequestHost: req.MaskRequestHost, HTTPSPorts: req.HTTPSPorts}); in.TrafficToken != "" || in.MaskRequestHost != "" || len(in.HTTPSPorts) > 0 {
		if err := o.cfg.Network.SetInbound(sb.ID, in); err != nil {
			return ctx, err
		}
	}
	sb.AllowInternet = p.AllowInternet
	return telemetry.With(ctx, telemetry.KeyNetworkAddr, att.Addr.String()), nil
}

// detachNetwork removes the sandbox's network once its processes are gone; a failure is
// logged (the next server start sweeps what is left).
func (o *Orchestrator) detachNetwork(ctx context.Context, id string) {
	if o.cfg.Network == nil {
		return
	}
	if err := o.cfg.Network.Detach(context.WithoutCancel(ctx), id); err != nil {
		o.logger(ctx).Error("network detach failed", "error", err.Error())
	}
}

// LiveSandbox returns a copy of a live sandbox of team (any team when teamID is ""), or the
// error a client gets for one that is gone or was never theirs (netpolicy.Sandboxes).
func (o *Orchestrator) LiveSandbox(ctx context.Context, teamID, id string) (*store.Sandbox, error) {
	e, err := o.entryFor(ctx, teamID, id)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return copySandbox(e.sb), nil
}

// LocalSandbox returns a copy of sandbox id when it runs on this server, nil otherwise; no
// record is read (netpolicy.Sandboxes: the network's refusals come often).
func (o *Orchestrator) LocalSandbox(id string) *store.Sandbox {
	o.mu.Lock()
	e := o.live[id]
	o.mu.Unlock()
	if e == nil {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return copySandbox(e.sb)
}

// ChangeNetwork runs change on a live sandbox of team under its lock, so a kill waits for it
// and a killed sandbox is refused (gone); then masks secrets in what is collected from it and
// records allowInternet on its record (netpolicy.Sandboxes: a policy update).
func (o *Orchestrator) ChangeNetwork(ctx context.Context, teamID, id string, allowInternet bool, secrets []string, change func(sb *store.Sandbox) error) error {
	e, err := o.entryFor(ctx, teamID, id)
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.killed {
		return gone(e.sb)
	}
	if err := change(copySandbox(e.sb)); err != nil {
		return err
	}
	if e.collector != nil {
		for _, v := range secrets {
			e.collector.AddSecret(v)
		}
	}
	e.sb.AllowInternet, e.sb.UpdatedAt = allowInternet, time.Now()
	if err := o.cfg.Store.UpdateSandbox(sandboxLog(ctx, e.sb), e.sb); err != nil {
		return fmt.Errorf("update network of %s: %w", id, err)
	}
	return nil
}

// withPorts records how the proxy reaches the sandbox's ports, and gives a sandbox with
// private ports its traffic access token, masked in everything collected from it like its
// other secrets.
func withPorts(e *entry, req CreateRequest) CreateRequest {
	e.maskHost, e.httpsPorts = req.MaskRequestHost, req.HTTPSPorts
	if req.PrivateTraffic {
		if req.trafficToken == "" { // a copy keeps its origin's
			req.trafficToken = randomHex(16)
		}
		e.trafficToken = req.trafficToken
		req.Secrets = append(append([]string(nil), req.Secrets...), e.trafficToken)
	}
	return req
}

// reclaimNetwork gives an adopted sandbox the network an earlier server recorded for it,
// and its inbound settings; what it returns carries the secrets its collector masks. A
// sandbox recorded with no network (the earlier server ran without one) has none.
func (o *Orchestrator) reclaimNetwork(ctx context.Context, e *entry) (CreateRequest, error) {
	if o.cfg.Network == nil {
		e.sb.AllowInternet = false
		return CreateRequest{}, nil
	}
	att, err := o.cfg.Network.Reclaim(ctx, e.sb.ID)
	if errors.Is(err, network.ErrNotAttached) {
		e.sb.AllowInternet = false
		return CreateRequest{}, nil
	}
	if err != nil {
		return CreateRequest{}, err
	}
	var req CreateRequest
	if p, ok := o.cfg.Network.Policy(e.sb.ID); ok {
		req.Secrets = p.Secrets()
	}
	if in, ok := o.cfg.Network.Inbound(e.sb.ID); ok {
		e.maskHost, e.httpsPorts, e.trafficToken = in.MaskRequestHost, in.HTTPSPorts, in.TrafficToken
		if in.TrafficToken != "" {
			req.Secrets = append(req.Secrets, in.TrafficToken)
		}
	}
	o.logger(ctx).Info("sandbox network reclaimed", telemetry.KeyNetworkAddr, att.Addr.String())
	return req, nil
}

// PortOptions says how the proxy reaches a live sandbox's ports: the Host header to send
// and the ports that serve HTTPS.
func (o *Orchestrator) PortOptions(id string) (string, []int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if e := o.live[id]; e != nil {
		return e.maskHost, e.httpsPorts
	}
	return "", nil
}

// TrafficToken is the token a live sandbox's ports require; "" when they are public (or
// the sandbox is not live: the proxy answers for those anyway).
func (o *Orchestrator) TrafficToken(id string) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	if e := o.live[id]; e != nil {
		return e.trafficToken
	}
	return ""
}

// networkConfig is a live sandbox's network config for a copy of it (a fork, a snapshot):
// its egress policy (nil without a network) and how the proxy reaches its ports.
func (o *Orchestrator) networkConfig(e *entry) (*egress.Policy, network.Inbound) {
	e.mu.Lock()
	in := network.Inbound{TrafficToken: e.trafficToken, MaskRequestHost: e.maskHost, HTTPSPorts: e.httpsPorts}
	id := e.sb.ID
	e.mu.Unlock()
	if o.cfg.Network == nil {
		return nil, in
	}
	p, ok := o.cfg.Network.Policy(id)
	if !ok {
		return nil, in
	}
	return &p, in
}
