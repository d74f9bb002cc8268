package orchestrator

import (
	"fmt"
	"time"

	"github.com/cove-dev/cove/internal/errdefs"
	"github.com/cove-dev/cove/internal/sandbox/runtime"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/sdk/reason"
)

// Errors callers branch on; the API maps them to HTTP statuses in one place.
var (
	// ErrNotFound: no such sandbox for this team.
	ErrNotFound = errdefs.New(errdefs.ErrNotFound, "sandbox not found")
	// ErrConflict: the sandbox is not in a state that allows the call (pause a paused one).
	ErrConflict = errdefs.New(errdefs.ErrConflict, "conflict")
	// ErrInvalid: the request is malformed.
	ErrInvalid = errdefs.New(errdefs.ErrInvalidArgument, "invalid request")
	// ErrTemplateNotFound: the requested template does not exist.
	ErrTemplateNotFound = errdefs.New(errdefs.ErrNotFound, "template not found")
	// ErrNoSpace: a snapshot did not fit on the data dir's disk (the sandbox runs on).
	ErrNoSpace = runtime.ErrNoSpace
)

// GoneError says a sandbox was killed, why and when.
type GoneError struct {
	ID     string
	Reason reason.KillReason
	At     time.Time
}

// Is makes a killed sandbox a not-found to the HTTP edges (the SDKs' kill() reads a 404).
func (e *GoneError) Is(target error) bool { return target == errdefs.ErrNotFound }

func (e *GoneError) Error() string {
	return fmt.Sprintf("sandbox %s was killed: %s at %s", e.ID, e.Reason, e.At.UTC().Format(time.RFC3339))
}

// PausedError says a sandbox is paused and will not resume on traffic.
type PausedError struct {
	ID string
	// WithoutMemory: it was paused keeping only its files, which traffic never resumes.
	WithoutMemory bool
}

// Is makes a paused sandbox a conflict to the HTTP edges.
func (e *PausedError) Is(target error) bool { return target == errdefs.ErrConflict }

func (e *PausedError) Error() string {
	if e.WithoutMemory {
		return fmt.Sprintf("sandbox %s is paused without its memory (a filesystem-only pause): traffic does not resume it, since resuming reboots it; connect or resume it first", e.ID)
	}
	return fmt.Sprintf("sandbox %s is paused (auto-resume is off): connect or resume it first", e.ID)
}

func gone(sb *store.Sandbox) error {
	at := time.Time{}
	if sb.KilledAt != nil {
		at = *sb.KilledAt
	}
	return &GoneError{ID: sb.ID, Reason: sb.KillReason, At: at}
}

// goneOf is gone for a live entry, read under its lock.
func (o *Orchestrator) goneOf(e *entry) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return gone(e.sb)
}
