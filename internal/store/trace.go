package store

import "context"

// TraceStore finds what one request id caused, within one team: the lines logged with it,
// the lifecycle events it caused, and the commands it started or signalled.
type TraceStore interface {
	TraceLogs(ctx context.Context, teamID, requestID string, limit int) ([]LogLine, error)
	TraceEvents(ctx context.Context, teamID, requestID string, limit int) ([]*Event, error)
	TraceCommands(ctx context.Context, teamID, requestID string, limit int) ([]*CommandRecord, error)
}
