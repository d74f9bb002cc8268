package cove

// The keys of the SDK's log lines: the values of Cove's one log-key registry (the server's
// internal/observe/telemetry Key* constants, which the SDK may not import), so a client line and a
// server line about the same request use the same keys. internal/layering's test fails when
// one of these is not the registry's constant of the same name.
const (
	keyCancelCause         = "cancel.cause"
	keyCancelDetail        = "cancel.detail"
	keyConnectCode         = "rpc.connect.code"
	keyDurationMS          = "duration_ms"
	keyError               = "error"
	keyHTTPMethod          = "http.request.method"
	keyHTTPStatus          = "http.response.status_code"
	keyKillReason          = "kill_reason"
	keyPID                 = "process.pid"
	keyRPCMethod           = "rpc.method"
	keyRequestID           = "request_id"
	keyRetryInMS           = "retry_in_ms"
	keySandboxID           = "sandbox.id"
	keyServerRequestID     = "server.request_id"
	keyStreamBytesReceived = "stream.bytes_received"
	keyStreamPhase         = "stream.phase"
	keyURLPath             = "url.path"
)
