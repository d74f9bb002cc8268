// Package cove is the Go SDK for Cove, the self-hosted E2B-compatible sandbox platform:
// make sandboxes, run commands in them, read and write their files, open terminals.
//
// The one idea: every call can be explained after the fact, from one id on both sides of
// the wire. Each call mints a request id (or takes yours, WithRequestID), sends it as
// X-E2B-Request-Id, and hands it back on its result (RequestID()) and on its error
// (RequestIDOf). Cove logs the same id on every line of the call, down to envd inside the
// sandbox. When a command's stream ends before the command does, the SDK logs one
// "stream cancelled" line saying why, from the stream's context and never from a guess:
//
//	cancel.cause    what ended the stream                      envd's stream end
//	timeout         the command's Timeout, or ctx's deadline   deadline (WARN)
//	sibling_cancel  ctx cancelled by someone else (errgroup)   client_cancel
//	caller_exit     the program is exiting (NotifyExit)        client_cancel
//	disconnect      CommandHandle.Disconnect                   client_cancel
//	rpc_error       the transport or the server failed         what envd saw
//
// So "why did this command stop?" is answered by grepping both logs for one request_id.
//
// A Client is configured from Config, whose empty fields come from COVE_API_URL,
// COVE_SANDBOX_URL and COVE_API_KEY, or the official E2B SDK's E2B_API_URL,
// E2B_SANDBOX_URL and E2B_API_KEY. Errors match ErrNotFound, ErrAuth, ErrConflict, ErrRateLimit and
// ErrTimeout with errors.Is; a command that exits non-zero is a *CommandExitError, and a
// sandbox that was killed is a *SandboxKilledError that says why.
//
// It must not import Cove's server-side packages (orchestrator, api, proxy, store, telemetry):
// only requestid, reason and envdapi, the shapes it shares with the server.
package cove
