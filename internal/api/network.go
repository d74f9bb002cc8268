package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/cove-dev/cove/internal/network"
	"github.com/cove-dev/cove/internal/orchestrator"
	cove "github.com/cove-dev/cove/sdk"
)

// Networks is what the API needs to read and replace sandboxes' egress policies.
type Networks interface {
	NetworkPolicy(ctx context.Context, teamID, id string) (network.Policy, bool)
	UpdateNetwork(ctx context.Context, teamID, id string, p network.Policy) error
	// TrafficToken is the token a sandbox's private ports require; "" when public.
	TrafficToken(id string) string
	// PortOptions is the Host header the proxy sends a sandbox's ports and its HTTPS ports.
	PortOptions(id string) (maskHost string, httpsPorts []int)
}

// egressBody is the part of E2B's SandboxNetworkConfig and SandboxNetworkUpdateConfig that
// says where a sandbox may connect.
type egressBody struct {
	AllowOut    []string        `json:"allowOut"`
	DenyOut     []string        `json:"denyOut"`
	EgressProxy json.RawMessage `json:"egressProxy"`
	Rules       json.RawMessage `json:"rules"`
}

// networkBody is E2B's SandboxNetworkConfig, the create body's network.
type networkBody struct {
	egressBody
	AllowPublicTraffic *bool   `json:"allowPublicTraffic"`
	MaskRequestHost    *string `json:"maskRequestHost"`
	HTTPSPorts         []int   `json:"httpsPorts"`
}

// networkUpdateBody is E2B's SandboxNetworkUpdateConfig (PUT /sandboxes/{id}/network).
type networkUpdateBody struct {
	egressBody
	AllowInternetAccess *bool `json:"allow_internet_access"`
}

// proxyJSON is E2B's SandboxEgressProxyConfig; the password is never echoed.
type proxyJSON struct {
	Address  string `json:"address"`
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`
}

// proxy reads egressProxy strictly; nil when absent or null.
func (b egressBody) proxy(field string) (*network.EgressProxy, error) {
	if len(b.EgressProxy) == 0 || string(b.EgressProxy) == "null" {
		return nil, nil
	}
	var p proxyJSON
	if err := strict(field, b.EgressProxy, &p); err != nil {
		return nil, err
	}
	return &network.EgressProxy{Address: p.Address, Username: p.Username, Password: p.Password}, nil
}

// strict decodes raw into v, refusing fields v does not have: a field Cove does not know
// would otherwise be silently ignored, and the caller would believe a rule holds.
func strict(field string, raw json.RawMessage, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %s: %v", errBadRequest, field, err)
	}
	return nil
}

// rules reads E2B's rules strictly: {"host": [{"transform": {"headers": {"K": "V"}}}]}.
func (b egressBody) rules(field string) (map[string][]map[string]string, error) {
	if len(b.Rules) == 0 || string(b.Rules) == "null" {
		return nil, nil
	}
	var raw map[string][]struct {
		Transform *struct {
			Headers map[string]string `json:"headers"`
		} `json:"transform"`
	}
	if err := strict(field, b.Rules, &raw); err != nil {
		return nil, err
	}
	out := make(map[string][]map[string]string, len(raw))
	for host, rules := range raw {
		for _, r := range rules {
			var h map[string]string
			if r.Transform != nil {
				h = r.Transform.Headers
			}
			out[host] = append(out[host], h)
		}
	}
	return out, nil
}

// createNetwork is what create's network object asks for beside the egress policy.
type createNetwork struct {
	policy     *network.Policy
	private    bool // allowPublicTraffic false
	maskHost   string
	httpsPorts []int
}

// parseCreateNetwork reads create's network object; a zero createNetwork when absent.
func parseCreateNetwork(raw json.RawMessage) (createNetwork, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return createNetwork{}, nil
	}
	var b networkBody
	if err := strict("network", raw, &b); err != nil {
		return createNetwork{}, err
	}
	out := createNetwork{private: b.AllowPublicTraffic != nil && !*b.AllowPublicTraffic, httpsPorts: b.HTTPSPorts}
	if b.MaskRequestHost != nil {
		out.maskHost = *b.MaskRequestHost
		if len(out.maskHost) > 253 || strings.ContainsAny(out.maskHost, " \t\r\n\x00/") {
			return createNetwork{}, fmt.Errorf("%w: network.maskRequestHost %q: want a host, ${PORT} for the port", errBadRequest, out.maskHost)
		}
	}
	for i, p := range b.HTTPSPorts {
		if p < 1 || p > 65535 || p == orchestrator.EnvdPort {
			return createNetwork{}, fmt.Errorf("%w: network.httpsPorts[%d] %d: want a port from 1 to 65535 but envd's (%d)", errBadRequest, i, p, orchestrator.EnvdPort)
		}
	}
	var err error
	out.policy, err = b.policy()
	return out, err
}

// policy parses the config's egress policy.
func (b networkBody) policy() (*network.Policy, error) {
	proxy, err := b.proxy("network.egressProxy")
	if err != nil {
		return nil, err
	}
	rules, err := b.rules("network.rules")
	if err != nil {
		return nil, err
	}
	p, err := network.ParsePolicy(network.Spec{AllowOut: b.AllowOut, DenyOut: b.DenyOut, EgressProxy: proxy, Rules: rules}, true)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errBadRequest, err)
	}
	return &p, nil
}

// updateNetwork serves PUT /sandboxes/{id}/network: the body replaces the sandbox's egress
// rules; a field left out is cleared (allow_internet_access left out is true).
func (a *api) updateNetwork(w http.ResponseWriter, r *http.Request, c caller) error {
	id := r.PathValue("id")
	var raw json.RawMessage
	if err := decode(r, &raw); err != nil {
		return err
	}
	var b networkUpdateBody
	if len(raw) > 0 {
		if err := strict("body", raw, &b); err != nil {
			return err
		}
	}
	proxy, err := b.proxy("egressProxy")
	if err != nil {
		return err
	}
	rules, err := b.rules("rules")
	if err != nil {
		return err
	}
	p, err := network.ParsePolicy(network.Spec{AllowInternet: b.AllowInternetAccess, AllowOut: b.AllowOut, DenyOut: b.DenyOut, EgressProxy: proxy, Rules: rules}, true)
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
	out := &cove.NetworkRules{AllowOut: p.AllowOutStrings(), DenyOut: network.Strings(p.DenyOut), AllowPublicTraffic: &public}
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
