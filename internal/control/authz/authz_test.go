package authz_test

import (
	"context"
	"testing"

	"github.com/cove-dev/cove/internal/control/authz"
)

func TestTheCallerRidesInTheContext(t *testing.T) {
	ctx := context.Background()
	if c := authz.From(ctx); c != (authz.Caller{}) {
		t.Fatalf("Cove's own work acts for %+v", c)
	}
	if _, ok := authz.Team(ctx); ok {
		t.Fatal("Cove's own work has a team scope")
	}
	ctx = authz.With(ctx, authz.Caller{TeamID: "team_1", KeyID: "key_1", KeyName: "ci"})
	if team, ok := authz.Team(ctx); !ok || team != "team_1" {
		t.Fatalf("team scope %q %v", team, ok)
	}
	if c := authz.From(ctx); c.KeyID != "key_1" || c.KeyName != "ci" {
		t.Fatalf("caller %+v", c)
	}
}
