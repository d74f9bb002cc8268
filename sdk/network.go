package cove

import (
	"context"
	"net/http"
	"net/url"
)

// NetworkRules are a sandbox's egress rules, E2B's SandboxNetworkConfig: create's network
// object, which the server decodes into this very type (refusing fields it lacks), and Info's
// network, which it emits as this type. Entries are CIDRs or IP
// addresses; "0.0.0.0/0" is all traffic. AllowOut wins over DenyOut.
type NetworkRules struct {
	AllowOut []string `json:"allowOut,omitempty"`
	DenyOut  []string `json:"denyOut,omitempty"`
	// EgressProxy tunnels the sandbox's outbound TCP through a SOCKS5 proxy (after the
	// rules); when the proxy is down, connections fail rather than go direct.
	EgressProxy *EgressProxy `json:"egressProxy,omitempty"`
	// Rules set headers on the sandbox's HTTP and HTTPS requests to a host ("api.example.com"
	// or "*.example.com"), on Cove's side: the values never enter the sandbox. Info shows
	// the header names with "***" for the values.
	Rules map[string][]Rule `json:"rules,omitempty"`
	// AllowPublicTraffic false keeps the sandbox's ports (all but envd's) private: a request
	// through the proxy needs Sandbox.TrafficAccessToken in the E2b-Traffic-Access-Token
	// header. Nil is true.
	AllowPublicTraffic *bool `json:"allowPublicTraffic,omitempty"`
	// MaskRequestHost is the Host header the proxy sends the sandbox's ports (${PORT} is the
	// port); HTTPSPorts are ports that serve HTTPS (their certificates are not verified).
	MaskRequestHost string `json:"maskRequestHost,omitempty"`
	HTTPSPorts      []int  `json:"httpsPorts,omitempty"`
}

// Rule is one transform of a host's requests.
type Rule struct {
	Transform Transform `json:"transform"`
}

// Transform holds the headers set (replaced) on matching requests.
type Transform struct {
	Headers map[string]string `json:"headers"`
}

// EgressProxy is a SOCKS5 proxy; Info never returns the password.
type EgressProxy struct {
	Address  string `json:"address"` // host:port
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`
}

// AllTraffic is the CIDR that matches every IPv4 destination (the SDKs' ALL_TRAFFIC).
const AllTraffic = "0.0.0.0/0"

// NetworkUpdate replaces a sandbox's egress policy: what it leaves out is cleared.
type NetworkUpdate struct {
	// NoInternet cuts the sandbox off from what AllowOut does not name.
	NoInternet  bool
	AllowOut    []string
	DenyOut     []string
	EgressProxy *EgressProxy
	Rules       map[string][]Rule
}

// SandboxNetworkUpdateConfig is E2B's, the body of PUT /sandboxes/{id}/network:
// UpdateNetwork sends it and the server decodes this very type, refusing fields it lacks.
// What it leaves out is cleared.
type SandboxNetworkUpdateConfig struct {
	// AllowInternetAccess false cuts the sandbox off from what AllowOut does not name;
	// absent is true.
	AllowInternetAccess *bool             `json:"allow_internet_access,omitempty"`
	AllowOut            []string          `json:"allowOut,omitempty"`
	DenyOut             []string          `json:"denyOut,omitempty"`
	EgressProxy         *EgressProxy      `json:"egressProxy,omitempty"`
	Rules               map[string][]Rule `json:"rules,omitempty"`
}

// UpdateNetwork replaces the egress policy of a running (or paused) sandbox, atomically; it
// applies to the sandbox's next packets.
func (c *Client) UpdateNetwork(ctx context.Context, sandboxID string, u NetworkUpdate) error {
	internet := !u.NoInternet
	body := SandboxNetworkUpdateConfig{AllowInternetAccess: &internet, AllowOut: u.AllowOut, DenyOut: u.DenyOut,
		EgressProxy: u.EgressProxy, Rules: u.Rules}
	_, err := c.do(ctx, "update sandbox network", sandboxID, http.MethodPut, "/sandboxes/"+url.PathEscape(sandboxID)+"/network", body, nil)
	return err
}

// UpdateNetwork replaces the sandbox's egress policy; see Client.UpdateNetwork.
func (s *Sandbox) UpdateNetwork(ctx context.Context, u NetworkUpdate) error {
	return s.client.UpdateNetwork(ctx, s.ID, u)
}
