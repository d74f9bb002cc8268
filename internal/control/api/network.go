package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/cove-dev/cove/internal/control/orchestrator"
	"github.com/cove-dev/cove/internal/sandbox/egress"
	cove "github.com/cove-dev/cove/sdk"
)

// Networks is what the API needs to read and replace sandboxes' egress policies
// (internal/control/netpolicy).
type Networks interface {
	NetworkPolicy(ctx context.Context, teamID, id string) (egress.Policy, bool)
	UpdateNetwork(ctx context.Context, teamID, id string, p egress.Policy) error
	// TrafficToken is the token a sandbox's private ports require; "" when public.
	TrafficToken(id string) string
	// PortOptions is the Host header the proxy sends a sandbox's ports and its HTTPS ports.
	PortOptions(id string) (maskHost string, httpsPorts []int)
}

// strict decodes raw into v, refusing fields v does not have (at any depth): a field Cove
// does not know would otherwise be silently ignored, and the caller would believe a rule holds.
func strict(field string, raw json.RawMessage, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %s: %v", errBadRequest, field, err)
	}
	return nil
}

// egressSpec is the egress package's reading of the contract's egress fields, E2B's
// SandboxNetworkConfig and SandboxNetworkUpdateConfig share them.
func egressSpec(allowOut, denyOut []string, proxy *cove.EgressProxy, rules map[string][]cove.Rule) egress.Spec {
	spec := egress.Spec{AllowOut: allowOut, DenyOut: denyOut}
	if proxy != nil {
		spec.EgressProxy = &egress.Proxy{Address: proxy.Address, Username: proxy.Username, Password: proxy.Password}
	}
	if rules != nil {
		spec.Rules = make(map[string][]map[string]string, len(rules))
		for host, rs := range rules {
			for _, r := range rs {
				spec.Rules[host] = append(spec.Rules[host], r.Transform.Headers)
			}
		}
	}
	return spec
}

// createNetwork is what create's network object asks for beside the egress policy.
type createNetwork struct {
	policy     *egress.Policy
	private    bool // allowPublicTraffic false
	maskHost   string
	httpsPorts []int
}

// parseCreateNetwork reads create's network object; a zero createNetwork when absent.
func parseCreateNetwork(raw json.RawMessage) (createNetwork, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return createNetwork{}, nil
	}
	var b cove.NetworkRules
	if err := strict("network", raw, &b); err != nil {
		return createNetwork{}, err
	}
	out := createNetwork{private: b.AllowPublicTraffic != nil && !*b.AllowPublicTraffic, httpsPorts: b.HTTPSPorts}
	if b.MaskRequestHost != "" {
		out.maskHost = b.MaskRequestHost
		if len(out.maskHost) > 253 || strings.ContainsAny(out.maskHost, " \t\r\n\x00/") {
			return createNetwork{}, fmt.Errorf("%w: network.maskRequestHost %q: want a host, ${PORT} for the port", errBadRequest, out.maskHost)
		}
	}
	for i, p := range b.HTTPSPorts {
		if p < 1 || p > 65535 || p == orchestrator.EnvdPort {
			return createNetwork{}, fmt.Errorf("%w: network.httpsPorts[%d] %d: want a port from 1 to 65535 but envd's (%d)", errBadRequest, i, p, orchestrator.EnvdPort)
		}
	}
	p, err := egress.ParsePolicy(egressSpec(b.AllowOut, b.DenyOut, b.EgressProxy, b.Rules), true)
	if err != nil {
		return createNetwork{}, fmt.Errorf("%w: %w", errBadRequest, err)
	}
	out.policy = &p
	return out, nil
}

// updateNetwork serves PUT /sandboxes/{id}/network: the body replaces the sandbox's egress
// rules; a field left out is cleared (allow_internet_access left out is true).
func (a *api) updateNetwork(w http.ResponseWriter, r *http.Request, c caller) error {
	id := r.PathValue("id")
	var raw json.RawMessage
	if err := decode(r, &raw); err != nil {
		return err
	}
	var b cove.SandboxNetworkUpdateConfig
	if len(raw) > 0 {
		if err := strict("body", raw, &b); err != nil {
			return err
		}
	}
	spec := egressSpec(b.AllowOut, b.DenyOut, b.EgressProxy, b.Rules)
	spec.AllowInternet = b.AllowInternetAccess
	p, err := egress.ParsePolicy(spec, true)
	if err != nil {
		return fmt.Errorf("%w: %w", errBadRequest, err)
	}
	if err := a.cfg.Networks.UpdateNetwork(r.Context(), c.team.ID, id, p); err != nil {
		return fmt.Errorf("update network of sandbox %s: %w", id, err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// networkOf is the network getInfo echoes for a live sandbox with rules; nil otherwise.
func (a *api) networkOf(ctx context.Context, teamID, id string) *cove.NetworkRules {
	if a.cfg.Networks == nil {
		return nil
	}
	p, ok := a.cfg.Networks.NetworkPolicy(ctx, teamID, id)
	mask, https := a.cfg.Networks.PortOptions(id)
	if !ok || len(p.AllowOut)+len(p.AllowHosts)+len(p.DenyOut)+len(p.Transforms)+len(https) == 0 && p.EgressProxy == nil &&
		a.cfg.Networks.TrafficToken(id) == "" && mask == "" {
		return nil
	}
	public := a.cfg.Networks.TrafficToken(id) == ""
	out := &cove.NetworkRules{AllowOut: p.AllowOutStrings(), DenyOut: egress.Strings(p.DenyOut), AllowPublicTraffic: &public}
	out.MaskRequestHost, out.HTTPSPorts = mask, https
	if p.EgressProxy != nil {
		out.EgressProxy = &cove.EgressProxy{Address: p.EgressProxy.Address, Username: p.EgressProxy.Username}
	}
	if len(p.Transforms) > 0 {
		// The header names, never their values: those are the secrets the rules keep
		// out of the sandbox (E2B echoes them; Cove masks them).
		out.Rules = map[string][]cove.Rule{}
		for _, t := range p.Transforms {
			h := map[string]string{}
			for k := range t.Headers {
				h[k] = "***"
			}
			out.Rules[t.Pattern] = []cove.Rule{{Transform: cove.Transform{Headers: h}}}
		}
	}
	return out
}
