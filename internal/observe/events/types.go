package events

import (
	"fmt"
	"reflect"

	cove "github.com/cove-dev/cove/sdk"
)

// EventType is what happened to a sandbox. The set is closed, and its registry is the
// contract's (sdk/events.go): each type with its payload type, which Emit checks.
type EventType string

// The event types' Go names: each is the registry's string (the lifecycle ones are E2B's
// names), never a second spelling of it.
const (
	// SandboxCreated: a sandbox was created.
	SandboxCreated EventType = cove.EventSandboxCreated
	// SandboxConnected: a client connected to a running sandbox (its TTL may have grown).
	SandboxConnected EventType = cove.EventSandboxConnected
	// SandboxPaused: a sandbox was paused, by a client or by the evictor (auto-pause).
	SandboxPaused EventType = cove.EventSandboxPaused
	// SandboxResumed: a paused sandbox runs again.
	SandboxResumed EventType = cove.EventSandboxResumed
	// SandboxUpdated: a sandbox's timeout changed. Data: UpdatedData.
	SandboxUpdated EventType = cove.EventSandboxUpdated
	// SandboxKilled: a sandbox is gone. Data: KilledData (kill_reason, execution).
	SandboxKilled EventType = cove.EventSandboxKilled
	// SandboxOOM: the kernel's OOM killer killed processes inside a sandbox that lives on.
	// Data: OOMData (count).
	SandboxOOM EventType = cove.EventSandboxOOM
	// SandboxCheckpointed: a running sandbox was checkpointed in place (briefly paused, same
	// id and TTL) for a fork or a snapshot.
	SandboxCheckpointed EventType = cove.EventSandboxCheckpointed
	// SandboxNetworkDenied: Cove's network rules refused connections of a sandbox (sampled:
	// at most a few per sandbox every two seconds).
	SandboxNetworkDenied EventType = cove.EventSandboxNetworkDenied
	// LimitReached: a bound refused or cut something of a team; the one type that may name no
	// sandbox (a create or a volume refused). Data: cove.LimitReachedEventData.
	LimitReached EventType = cove.EventLimitReached
)

// EventTypes lists every EventType: the registry's, in its order.
var EventTypes = func() []EventType {
	var out []EventType
	for _, t := range cove.EventTypes() {
		out = append(out, EventType(t))
	}
	return out
}()

// unknownType is what String shows for the zero EventType.
const unknownType = "unknown"

func (t EventType) String() string {
	if t == "" {
		return unknownType
	}
	return string(t)
}

// Valid reports whether t is one of EventTypes.
func (t EventType) Valid() bool {
	for _, k := range EventTypes {
		if k == t {
			return true
		}
	}
	return false
}

// CheckData returns an error unless data is t's payload type in the registry (a pointer to
// it, or the value) or nil: an event whose payload is another type's would reach webhooks and
// the SDK as a shape their type does not promise.
func CheckData(t EventType, data any) error {
	if data == nil {
		return nil
	}
	want, err := cove.EventDataFor(string(t))
	if err != nil {
		return err
	}
	wt, got := reflect.TypeOf(want), reflect.TypeOf(data)
	if got != wt && got != wt.Elem() {
		return fmt.Errorf("event %s: payload is %v, its type's is %v (sdk/events.go registers them)", t, got, wt)
	}
	return nil
}

// ParseEventType returns the EventType named s; it rejects "" and names outside the set.
func ParseEventType(s string) (EventType, error) {
	if t := EventType(s); t.Valid() {
		return t, nil
	}
	return "", fmt.Errorf("unknown event type %q", s)
}
