package reason

// PauseKind is how a sandbox is paused.
type PauseKind string

// The pause kinds.
const (
	// PauseSnapshot writes the sandbox's processes, memory and files to disk (a checkpoint)
	// and frees its memory; it survives a server restart; resuming restores it. The
	// default where the runtime can checkpoint.
	PauseSnapshot PauseKind = "snapshot"
	// PauseFreeze stops the sandbox's processes in place (cgroup freezer): milliseconds
	// either way, but its memory stays in the host's RAM.
	PauseFreeze PauseKind = "freeze"
)

// PauseKinds lists every PauseKind.
var PauseKinds = []PauseKind{PauseSnapshot, PauseFreeze}

func (k PauseKind) String() string {
	if k == "" {
		return string(PauseSnapshot)
	}
	return string(k)
}

// ParsePauseKind returns the PauseKind named s.
func ParsePauseKind(s string) (PauseKind, error) {
	return parse("pause kind", s, PauseKinds)
}
