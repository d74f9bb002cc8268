package server

import (
	"context"
	"sync/atomic"

	"github.com/cove-dev/cove/internal/observe/events"
)

// limitEvents tells teams of the bounds the server's parts enforce outside the
// orchestrator (the log store's budgets, template builds' time limits), through the event
// bus once it runs: the log ingester starts before it.
type limitEvents struct {
	limits atomic.Pointer[events.Limits]
}

// start sends the events to bus from now on.
func (l *limitEvents) start(bus *events.Bus, s *instance) {
	l.limits.Store(events.NewLimits(bus, s.cfg.Logger))
}

// reached is events.Limits.Reached, a no-op before start.
func (l *limitEvents) reached(ctx context.Context, team, sandboxID, templateID, limit, detail string) {
	l.limits.Load().Reached(ctx, team, sandboxID, templateID, limit, detail)
}

// logLimit is the ingester's OnLimit.
func (l *limitEvents) logLimit(team, sandboxID, templateID, limit, detail string) {
	l.reached(context.Background(), team, sandboxID, templateID, limit, detail)
}
