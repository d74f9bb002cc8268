package reason

// CancelCause is the local cause of a client cancelling a stream before its end event.
type CancelCause string

// The cancel causes.
const (
	// CancelTimeout: the call's or the context's deadline passed.
	CancelTimeout CancelCause = "timeout"
	// CancelSibling: a context was cancelled by someone else, an errgroup sibling say.
	CancelSibling CancelCause = "sibling_cancel"
	// CancelCallerExit: the calling process is exiting (SIGINT, SIGTERM).
	CancelCallerExit CancelCause = "caller_exit"
	// CancelDisconnect: an explicit Disconnect; the process keeps running.
	CancelDisconnect CancelCause = "disconnect"
	// CancelRPCError: the transport failed.
	CancelRPCError CancelCause = "rpc_error"
)

// CancelCauses lists every CancelCause.
var CancelCauses = []CancelCause{CancelTimeout, CancelSibling, CancelCallerExit, CancelDisconnect, CancelRPCError}

func (c CancelCause) String() string {
	if c == "" {
		return string(CancelRPCError)
	}
	return string(c)
}

// ParseCancelCause returns the CancelCause named s.
func ParseCancelCause(s string) (CancelCause, error) {
	return parse("cancel cause", s, CancelCauses)
}
