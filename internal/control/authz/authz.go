// Package authz says who a request acts for: the caller an edge authenticated (an API key of a
// team, a console session, the admin), carried in the request's context, and the team scope
// every team API reads from it. The API, the console and the volume content edge set it;
// the team APIs (events, logs, metrics, traces), the orchestrator and the event bus read it.
//
// The one idea: authentication happens once, at an edge; below it, "whose is this?" is
// answered from the Caller, never from a header or a second lookup.
//
// authz imports nothing of Cove's: every package may use it.
package authz

import "context"

// Caller is who a request acts for.
type Caller struct {
	TeamID  string // the team the request acts for; "" for Cove's own work
	KeyID   string // the API key (or console session key) it authenticated with
	KeyName string // that key's name, for the records it causes ("console" for the console)
}

type callerKey struct{}

// With returns ctx acting for c.
func With(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// From returns the caller ctx acts for; the zero Caller for Cove's own work (a TTL, a sweep).
func From(ctx context.Context) Caller {
	c, _ := ctx.Value(callerKey{}).(Caller)
	return c
}

// Team returns the authenticated caller's team: the scope of every team API. false when no
// caller was authenticated.
func Team(ctx context.Context) (string, bool) {
	c := From(ctx)
	return c.TeamID, c.TeamID != ""
}
