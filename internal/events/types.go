package events

import "fmt"

// EventType is what happened to a sandbox. The set is closed: this file is its registry.
type EventType string

// The event types. The lifecycle ones are E2B's names.
const (
	// SandboxCreated: a sandbox was created.
	SandboxCreated EventType = "sandbox.lifecycle.created"
	// SandboxConnected: a client connected to a running sandbox (its TTL may have grown).
	SandboxConnected EventType = "sandbox.lifecycle.connected"
	// SandboxPaused: a sandbox was paused, by a client or by the evictor (auto-pause).
	SandboxPaused EventType = "sandbox.lifecycle.paused"
	// SandboxResumed: a paused sandbox runs again.
	SandboxResumed EventType = "sandbox.lifecycle.resumed"
	// SandboxUpdated: a sandbox's timeout changed. Data: UpdatedData.
	SandboxUpdated EventType = "sandbox.lifecycle.updated"
	// SandboxKilled: a sandbox is gone. Data: KilledData (kill_reason, execution).
	SandboxKilled EventType = "sandbox.lifecycle.killed"
	// SandboxOOM: the kernel's OOM killer killed processes inside a sandbox that lives on.
	// Data: OOMData (count).
	SandboxOOM EventType = "sandbox.lifecycle.oom"
	// SandboxNetworkDenied: Cove's network rules refused connections of a sandbox (sampled:
	// at most a few per sandbox every two seconds). Data: NetworkDeniedData.
	SandboxNetworkDenied EventType = "sandbox.network.denied"
)

// EventTypes lists every EventType.
var EventTypes = []EventType{
	SandboxCreated, SandboxConnected, SandboxPaused, SandboxResumed, SandboxUpdated,
	SandboxKilled, SandboxOOM, SandboxNetworkDenied,
}

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

// ParseEventType returns the EventType named s; it rejects "" and names outside the set.
func ParseEventType(s string) (EventType, error) {
	if t := EventType(s); t.Valid() {
		return t, nil
	}
	return "", fmt.Errorf("unknown event type %q", s)
}
