package reason

// EndCause says why a command ended. envd reports the first four; the host sets
// EndSandboxKilled when a command's sandbox ended under it. The empty value is a command
// still running.
type EndCause string

// The end causes.
const (
	// EndExited: it exited by itself, or was signalled by nobody Cove knows.
	EndExited EndCause = "exited"
	// EndKilled: a client's SendSignal.
	EndKilled EndCause = "killed"
	// EndTimeout: its Connect-Timeout-Ms deadline.
	EndTimeout EndCause = "timeout"
	// EndOOMKilled: the kernel's OOM killer, at the sandbox's memory limit.
	EndOOMKilled EndCause = "oom_killed"
	// EndSandboxKilled: its sandbox was killed or died (the record's kill reason says why).
	EndSandboxKilled EndCause = "sandbox_killed"
	// EndSandboxPaused: its sandbox was paused without its memory (a filesystem-only pause),
	// which stops every process; the resume reboots the sandbox without it.
	EndSandboxPaused EndCause = "sandbox_paused"
)

// EndCauses lists every EndCause.
var EndCauses = []EndCause{EndExited, EndKilled, EndTimeout, EndOOMKilled, EndSandboxKilled, EndSandboxPaused}

// String never returns "": a command without an end cause is "running".
func (c EndCause) String() string {
	if c == "" {
		return "running"
	}
	return string(c)
}

// ParseEndCause returns the EndCause named s; "" parses as the empty value (still running).
func ParseEndCause(s string) (EndCause, error) {
	if s == "" {
		return "", nil
	}
	return parse("end cause", s, EndCauses)
}
