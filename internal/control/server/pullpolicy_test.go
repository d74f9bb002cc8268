package server

import (
	"net/netip"
	"testing"

	"github.com/cove-dev/cove/internal/control/orchestrator"
)

// A team's fromImage pulls follow its egress policy, as its build steps do.
func TestPullsFollowTheTeamsEgressPolicy(t *testing.T) {
	off, on := false, true
	for _, tt := range []struct {
		name   string
		egress *orchestrator.Egress
		host   string
		addr   string
		want   bool
	}{
		{"a team without rules reaches the internet", nil, "registry.test", "198.18.0.9", true},
		{"internet access off refuses what allowOut does not name", &orchestrator.Egress{AllowInternetAccess: &off, AllowOut: []string{"198.18.0.5"}}, "registry.test", "198.18.0.9", false},
		{"internet access off allows an address allowOut names", &orchestrator.Egress{AllowInternetAccess: &off, AllowOut: []string{"198.18.0.5"}}, "registry.test", "198.18.0.5", true},
		{"internet access off allows a host allowOut names", &orchestrator.Egress{AllowInternetAccess: &off, AllowOut: []string{"registry.test"}}, "registry.test", "198.18.0.9", true},
		{"denyOut refuses its addresses", &orchestrator.Egress{AllowInternetAccess: &on, DenyOut: []string{"198.18.0.0/24"}}, "registry.test", "198.18.0.9", false},
		{"denyOut leaves the rest", &orchestrator.Egress{AllowInternetAccess: &on, DenyOut: []string{"198.18.0.0/24"}}, "registry.test", "198.18.1.9", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := pullPolicy(tt.egress, "team-1")(tt.host, netip.MustParseAddr(tt.addr)); got != tt.want {
				t.Fatalf("allowed = %v, want %v", got, tt.want)
			}
		})
	}
}
