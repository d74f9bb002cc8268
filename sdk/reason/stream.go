package reason

// StreamEnd says how a server stream ended.
type StreamEnd string

// The stream ends.
const (
	// StreamCompleted: the stream sent its last event and closed normally.
	StreamCompleted StreamEnd = "completed"
	// StreamClientCancel: the client cancelled or went away.
	StreamClientCancel StreamEnd = "client_cancel"
	// StreamDeadline: the call's deadline (Connect-Timeout-Ms) passed.
	StreamDeadline StreamEnd = "deadline"
	// StreamServerError: the server failed.
	StreamServerError StreamEnd = "server_error"
	// StreamSandboxKilled: the sandbox was killed under the stream.
	StreamSandboxKilled StreamEnd = "sandbox_killed"
	// StreamRejected: refused before its start event because the request was wrong (a bad
	// argument, an unknown pid, a permission): the client's doing, not the server's.
	StreamRejected StreamEnd = "rejected"
)

// StreamEnds lists every StreamEnd.
var StreamEnds = []StreamEnd{StreamCompleted, StreamClientCancel, StreamDeadline, StreamServerError, StreamSandboxKilled, StreamRejected}

func (s StreamEnd) String() string {
	if s == "" {
		return string(StreamServerError)
	}
	return string(s)
}

// ParseStreamEnd returns the StreamEnd named s.
func ParseStreamEnd(s string) (StreamEnd, error) {
	return parse("stream end", s, StreamEnds)
}

// StreamPhase says where in its life a stream ended.
type StreamPhase string

// The stream phases.
const (
	// PhaseBeforeStart: before the start event was sent.
	PhaseBeforeStart StreamPhase = "before_start"
	// PhaseStreaming: after the start event, while the process ran.
	PhaseStreaming StreamPhase = "streaming"
	// PhaseAfterExit: after the process exited (its end event sent or being sent).
	PhaseAfterExit StreamPhase = "after_exit"
)

// StreamPhases lists every StreamPhase.
var StreamPhases = []StreamPhase{PhaseBeforeStart, PhaseStreaming, PhaseAfterExit}

func (p StreamPhase) String() string {
	if p == "" {
		return string(PhaseBeforeStart)
	}
	return string(p)
}

// ParseStreamPhase returns the StreamPhase named s.
func ParseStreamPhase(s string) (StreamPhase, error) {
	return parse("stream phase", s, StreamPhases)
}
