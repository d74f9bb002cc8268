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
	// PauseFilesystem keeps only the sandbox's files (E2B's keepMemory: false): its
	// processes are stopped and its memory dropped; resuming cold-boots it on the kept files
	// (the template's start command and ready check run again). Traffic never resumes it.
	PauseFilesystem PauseKind = "filesystem"
)

// PauseKinds lists every PauseKind.
var PauseKinds = []PauseKind{PauseSnapshot, PauseFreeze, PauseFilesystem}

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

// KeepsMemory reports whether a sandbox paused this way resumes with its processes and
// memory (a restore or a thaw) rather than a cold boot.
func (k PauseKind) KeepsMemory() bool { return k != PauseFilesystem }
