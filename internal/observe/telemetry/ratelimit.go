package telemetry

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// maxLimitedKeys bounds a RateLimited's memory: past it, keys idle for a whole interval go.
const maxLimitedKeys = 4096

// RateLimited passes at most one log line per key per interval, for warnings that can repeat
// per request or per sandbox (a failing disk, an unreachable collector). The first line for a
// key always passes; the next one that passes after a quiet interval carries log.suppressed,
// the number of lines dropped in between, so nothing is silently lost from the count.
type RateLimited struct {
	every time.Duration
	now   func() time.Time

	mu   sync.Mutex
	keys map[string]*limitedKey
}

type limitedKey struct {
	last       time.Time
	suppressed int
}

// NewRateLimited returns a limiter passing one line per key every interval.
func NewRateLimited(every time.Duration) *RateLimited {
	return &RateLimited{every: every, now: time.Now, keys: map[string]*limitedKey{}}
}

// Allow reports whether a line for key may be logged now and how many lines for key were
// suppressed since the last one that was.
func (r *RateLimited) Allow(key string) (ok bool, suppressed int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	k := r.keys[key]
	if k == nil {
		if len(r.keys) >= maxLimitedKeys {
			for name, old := range r.keys {
				if now.Sub(old.last) >= r.every {
					delete(r.keys, name)
				}
			}
			if len(r.keys) >= maxLimitedKeys { // a burst of fresh keys: start over rather than grow
				clear(r.keys)
			}
		}
		r.keys[key] = &limitedKey{last: now}
		return true, 0
	}
	if now.Sub(k.last) < r.every {
		k.suppressed++
		return false, 0
	}
	suppressed, k.suppressed, k.last = k.suppressed, 0, now
	return true, suppressed
}

// Warn logs msg at warn level on logger unless a line with the same msg and key passed less
// than an interval ago. key tells apart the things a warning is about (a sandbox id, a team);
// "" makes msg alone the key.
func (r *RateLimited) Warn(ctx context.Context, logger *slog.Logger, key, msg string, args ...any) {
	ok, suppressed := r.Allow(msg + "\x00" + key)
	if !ok {
		return
	}
	if suppressed > 0 {
		args = append(args, KeySuppressed, suppressed)
	}
	logger.WarnContext(ctx, msg, args...)
}

// Warnings is the process-wide limiter for repeated warnings: one line per message and key
// a minute.
var Warnings = NewRateLimited(time.Minute)
