package api_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/cove-dev/cove/internal/builder/template/build"
	"github.com/cove-dev/cove/internal/control/api"
	"github.com/cove-dev/cove/internal/control/netpolicy"
	"github.com/cove-dev/cove/internal/control/oidc"
	"github.com/cove-dev/cove/internal/control/orchestrator"
	"github.com/cove-dev/cove/internal/control/secrets"
	"github.com/cove-dev/cove/internal/control/volumes"
	"github.com/cove-dev/cove/internal/httpx"
	"github.com/cove-dev/cove/internal/store/sqlite"
)

// TestEveryRouteIsDeclaredOnceWithItsLevel reads the API's route table with every optional
// part wired: a pattern appears once, the admin level is the /admin/ routes', and only the
// routes listed here are open to a caller without a key (each checks a credential of its own
// or answers anyone).
func TestEveryRouteIsDeclaredOnceWithItsLevel(t *testing.T) {
	orch := (*orchestrator.Orchestrator)(nil)
	routes := api.Routes(api.Config{Sandboxes: orch, Durable: orch, Volumes: (*volumes.Service)(nil), Networks: (*netpolicy.Service)(nil), Pools: orch,
		Secrets: (*secrets.Store)(nil), Identity: (*oidc.Issuer)(nil), Activity: (*sqlite.DB)(nil), Builds: &build.Builds{}})
	open := []string{
		"GET /health", "GET " + oidc.DiscoveryPath, "GET " + oidc.JWKSPath, // liveness, discovery for clouds
		"PUT /templates/{templateID}/files/{hash}/upload", // the upload link's token
		"/", // the unrouted answer (a snapshot's delete authenticates there)
	}
	seen := map[string]bool{}
	for _, rt := range routes {
		if seen[rt.Pattern] {
			t.Errorf("%s is declared twice", rt.Pattern)
		}
		seen[rt.Pattern] = true
		_, path, _ := strings.Cut(rt.Pattern, " ")
		switch {
		case strings.HasPrefix(path, "/admin/") != (rt.Auth == httpx.AuthAdmin):
			t.Errorf("%s is %s: the admin level is the /admin/ routes' and theirs only", rt.Pattern, rt.Auth)
		case rt.Auth == httpx.AuthNone && !slices.Contains(open, rt.Pattern) && !strings.HasPrefix(path, "/volumecontent/"):
			t.Errorf("%s needs no key: a route open to anyone must be listed here", rt.Pattern)
		case rt.Auth != httpx.AuthNone && rt.Auth != httpx.AuthTeam && rt.Auth != httpx.AuthAdmin:
			t.Errorf("%s is %s: the API authenticates teams and the admin", rt.Pattern, rt.Auth)
		}
	}
	for _, p := range append(open, "POST /sandboxes", "GET /v2/sandboxes", "DELETE /admin/sandboxes/{id}", "POST /sandboxes/{id}/fork",
		"GET /volumecontent/{volumeID}/file", "POST /v3/templates", "GET /secrets", "GET /pools") {
		if !seen[p] {
			t.Errorf("no route %s", p)
		}
	}
}
