package events

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/cove-dev/cove/internal/control/authz"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	cove "github.com/cove-dev/cove/sdk"
)

// Emitter is what Limits sends its events to (a Bus).
type Emitter interface {
	Emit(ctx context.Context, ev Event) error
}

// LimitEvery is how often Limits tells one team of the same limit (for one sandbox).
const LimitEvery = 10 * time.Second

// Limits tells teams that a bound refused or cut something of theirs (LimitReached), at
// most once per team, limit and sandbox every LimitEvery: a client retrying a refused create
// in a loop, or a sandbox whose log lines are dropped line after line, makes one event, not
// thousands. A nil *Limits tells nobody.
type Limits struct {
	to     Emitter
	logger *slog.Logger
	now    func() time.Time

	mu   sync.Mutex
	last map[string]time.Time
}

// NewLimits returns a Limits emitting to to; nil to is a nil *Limits.
func NewLimits(to Emitter, logger *slog.Logger) *Limits {
	if to == nil {
		return nil
	}
	return &Limits{to: to, logger: logger, now: time.Now, last: map[string]time.Time{}}
}

// Reached tells team that limit (a cove.Limit* name) refused or cut something: in sandbox
// sandboxID of template templateID, or none (""). detail is what the client was told.
func (l *Limits) Reached(ctx context.Context, team, sandboxID, templateID, limit, detail string) {
	if l == nil || team == "" {
		return
	}
	key := team + "\x00" + limit + "\x00" + sandboxID
	now := l.now()
	l.mu.Lock()
	if at, ok := l.last[key]; ok && now.Sub(at) < LimitEvery {
		l.mu.Unlock()
		return
	}
	l.last[key] = now
	if len(l.last) > 10000 { // forget the old ones, not the map's bound
		for k, at := range l.last {
			if now.Sub(at) >= LimitEvery {
				delete(l.last, k)
			}
		}
	}
	l.mu.Unlock()
	data := &cove.LimitReachedEventData{Limit: limit, Detail: detail}
	if name := authz.From(ctx).KeyName; name != "" {
		data.SetAPIKeyName(name)
	}
	ev := Event{Type: LimitReached, TeamID: team, SandboxID: sandboxID, TemplateID: templateID, Data: data}
	ev.APIKeyID = authz.From(ctx).KeyID
	if err := l.to.Emit(context.WithoutCancel(ctx), ev); err != nil && l.logger != nil {
		l.logger.Warn("limit event not recorded", telemetry.KeyEventType, LimitReached.String(), telemetry.KeyError, err.Error())
	}
}
