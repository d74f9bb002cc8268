package netpolicy_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/cove-dev/cove/internal/control/netpolicy"
	"github.com/cove-dev/cove/internal/errdefs"
	"github.com/cove-dev/cove/internal/sandbox/egress"
)

// A server run with --network=false keeps no policy: the orchestrator's tests
// (internal/control/orchestrator/network_test.go) drive the service over live sandboxes.
func TestAServerWithoutNetworksKeepsNoPolicy(t *testing.T) {
	svc := netpolicy.New(netpolicy.Config{})
	ctx := context.Background()
	t.Run("an update is a 409 saying the server gives sandboxes no network", func(t *testing.T) {
		err := svc.UpdateNetwork(ctx, "team", "isandbox", egress.Policy{AllowInternet: true})
		if !errors.Is(err, netpolicy.ErrConflict) || errdefs.Status(err) != http.StatusConflict || !strings.Contains(err.Error(), "--network=false") {
			t.Errorf("update: %v (status %d)", err, errdefs.Status(err))
		}
	})
	t.Run("a read finds no policy", func(t *testing.T) {
		if p, ok := svc.NetworkPolicy(ctx, "team", "isandbox"); ok {
			t.Errorf("policy %+v", p)
		}
	})
}
