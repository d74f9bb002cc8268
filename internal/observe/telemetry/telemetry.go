// Package telemetry carries Cove's request ids and structured logger through a context.
//
// The one idea: a request id and the facts known about a call (sandbox, team, operation) are
// attached to the context once, where they become known, and every log line below gets them
// for free through Logger(ctx).
//
// It owns the context logger, request ids in contexts, the metric and log-key registries and
// OTel. It must not import the store, the orchestrator, the edges (api, proxy, httpx) or envd:
// everything imports it.
package telemetry

import (
	"context"
	"io"
	"log/slog"
	"os"
	"slices"
)

// Log keys shared by every part of Cove. Same key, same meaning, everywhere.
const (
	KeyRequestID   = "request_id"
	KeyOperationID = "operation_id"
	KeyRPCMethod   = "rpc.method"
	KeyPID         = "process.pid"
	KeyExitCode    = "process.exit.code"
	KeySignal      = "process.signal"
	KeyStreamEnd   = "stream.end"
	KeyStreamPhase = "stream.phase"
	KeyCancelCause = "cancel.cause"
	KeyErrorType   = "error.type"
	KeySandboxID   = "sandbox.id"
	KeyTemplateID  = "template.id"
	KeyBuildID     = "build.id" // a template build's
	KeyTeamID      = "team.id"
	KeyKillReason  = "kill_reason"
	KeySuppressed  = "log.suppressed"

	// A command's facts: who signalled it, why it ended, as whom and where it ran.
	KeySignalRequestID = "signal.request_id"
	KeyEndCause        = "end_cause"
	KeyUser            = "user"
	KeyCwd             = "cwd"

	// The HTTP edges' access lines (OpenTelemetry's names) and their common facts.
	KeyHTTPMethod   = "http.request.method"
	KeyHTTPRoute    = "http.route"
	KeyHTTPStatus   = "http.response.status_code"
	KeyHTTPBodySize = "http.response.body.size"
	KeyURLPath      = "url.path"
	KeyDurationMS   = "duration_ms"
	KeyError        = "error"
	KeyStack        = "stack"
	KeySandboxPort  = "sandbox.port"
	KeyAPIKeyID     = "api_key.id"

	// The server's start and stop, and envd's.
	KeyAddr           = "addr"
	KeyDataDir        = "data_dir"
	KeyOnStop         = "on_stop"
	KeyVersion        = "version"
	KeyOSPID          = "pid"
	KeyReap           = "reap"
	KeyAccessTokenSet = "access_token_set"
	KeyDefaultUser    = "default_user"
	KeyDefaultWorkdir = "default_workdir"
	KeyEnvNames       = "env_names"
	KeyService        = "service"     // the program a line is from (envd)
	KeyLogDropped     = "log.dropped" // lines a full pipe dropped
	KeyHint           = "hint"
	KeyCaller         = "caller"
	KeyActor          = "actor"
	KeyPage           = "page"
	KeyDetail         = "detail"
	KeyUpstreamError  = "upstream_error"
	KeyTry            = "try"
	KeyRetryInMS      = "retry_in_ms"
	KeyWaitedMS       = "waited_ms"
	KeyLines          = "lines"
	KeyDropped        = "dropped"
	KeyCommands       = "commands"
	KeySandboxes      = "sandboxes"
	KeySelfPID        = "pid"

	// A sandbox's lifecycle.
	KeyState               = "state"
	KeyStateBefore         = "state_before"
	KeyRuntimeState        = "runtime.state"
	KeyRuntimeEngine       = "runtime.engine"
	KeyEndAt               = "end_at"
	KeyPreviousEndAt       = "previous_end_at"
	KeyTimeoutS            = "timeout_s"
	KeySecure              = "secure"
	KeyAutoPause           = "auto_pause"
	KeyAllowInternetAccess = "allow_internet_access"
	KeyPauseKind           = "pause.kind"
	KeyPurpose             = "purpose"
	// KeyLaunch is how a sandbox started (the orchestrator's launch kinds: create, claim, copy,
	// move, pool, build); KeyStage the launch step a failed start stopped at.
	KeyLaunch              = "launch"
	KeyStage               = "stage"
	KeySandboxExitCode     = "exit_code"
	KeySandboxSignal       = "signal"
	KeyOOMKilled           = "oom_killed"
	KeyOOMKills            = "oom_kills"
	KeyMemoryLimitBytes    = "memory.limit_bytes"
	KeyMemoryMaxUsageBytes = "memory.max_usage_bytes"
	KeyForkedFrom          = "forked_from"
	KeySnapshotID          = "snapshot.id"
	KeySnapshotBytes       = "snapshot.bytes"
	KeySnapshotZeroBytes   = "snapshot.zero_bytes"
	KeyVolumeID            = "volume.id"
	KeyVolumeName          = "volume.name"
	KeyVolumeSizeBytes     = "volume.size_bytes"
	KeyVolumes             = "volumes"

	// envd's processes, files and streams.
	KeyProcessCommand      = "process.command"
	KeyProcessArgsCount    = "process.args_count"
	KeyProcessTag          = "process.tag"
	KeyProcessUser         = "process.user"
	KeyProcessCwd          = "process.cwd"
	KeyProcessPTY          = "process.pty"
	KeyProcessEnvNames     = "process.env_names"
	KeyProcessCPUSystemMS  = "process.cpu_system_ms"
	KeyProcessCPUUserMS    = "process.cpu_user_ms"
	KeyProcessExited       = "process.exited"
	KeyProcessMaxRSSKiB    = "process.max_rss_kib"
	KeyProcessStatus       = "process.status"
	KeyProcessStderrBytes  = "process.stderr_bytes"
	KeyProcessStdoutBytes  = "process.stdout_bytes"
	KeySignalSent          = "signal.sent"
	KeyExecutionMS         = "execution_ms"
	KeyConnectCode         = "rpc.connect.code"
	KeyStreamBytesSent     = "stream.bytes_sent"
	KeyStreamBytesReceived = "stream.bytes_received"
	KeyCancelDetail        = "cancel.detail"
	KeyPath                = "path"
	KeyDir                 = "dir"
	KeyRecursive           = "recursive"
	KeyWatcherID           = "watcher.id"
	KeyFiles               = "files"
	KeyBytes               = "bytes"

	// Events, webhooks and retention.
	KeyEventID              = "event.id"
	KeyEventType            = "event.type"
	KeyWebhookID            = "webhook.id"
	KeyWebhookDeliveryID    = "webhook.delivery.id"
	KeyWebhookDeliveryState = "webhook.delivery.state"
	KeyAttempt              = "attempt"
	KeyNextRetryAt          = "next_retry_at"
	KeyDataset              = "dataset"
	KeyTTLRows              = "ttl_rows"
	KeyCapRows              = "cap_rows"

	// Sandbox networking.
	KeyNetworkAddr         = "network.addr"
	KeyNetworkAllowOut     = "network.allow_out"
	KeyNetworkDenyOut      = "network.deny_out"
	KeyNetworkDenyKind     = "network.deny_kind"
	KeyNetworkDestination  = "network.destination"
	KeyNetworkDNSUpstreams = "network.dns_upstreams"
	KeyNetworkEgressLimit  = "network.egress_limit"
	KeyNetworkLink         = "network.link"
	KeyNetworkPackets      = "network.packets"
	KeyNetworkPool         = "network.pool"
	KeyNetworkPort         = "network.port"
	KeyNetworkProtocol     = "network.protocol"
	KeyNetworkProxy        = "network.proxy"
	KeyNetworkRule         = "network.rule"
	KeyNetworkTable        = "network.table"
	KeyNetworkWarm         = "network.warm"
	KeyDNSUpstream         = "dns.upstream"

	// The Go SDK's client lines.
	KeyServerRequestID = "server.request_id"

	// Workload identity (internal/control/oidc): the issuer URL and a signing key's id.
	KeyIdentityIssuer = "identity.issuer"
	KeyIdentityKid    = "identity.kid"
)

type loggerKey struct{}

// NewLogger returns Cove's JSON logger writing to w at the given level. Its lines carry
// trace_id and span_id when their context has a span, and reach the OTLP collector too
// while SetupOTel exports.
func NewLogger(w io.Writer, level slog.Leveler) *slog.Logger {
	return slog.New(newLogHandler(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level})))
}

// WithLogger returns a context whose Logger is l. The fields With added to the previous
// logger are forgotten along with it.
func WithLogger(ctx context.Context, l *slog.Logger) context.Context {
	ctx = context.WithValue(ctx, fieldsKey{}, []string(nil))
	return context.WithValue(ctx, loggerKey{}, l)
}

// Logger returns the context's logger, or a JSON logger on stderr when none was set.
func Logger(ctx context.Context) *slog.Logger {
	if l, ok := ctx.Value(loggerKey{}).(*slog.Logger); ok && l != nil {
		return l
	}
	return defaultLogger
}

var defaultLogger = NewLogger(os.Stderr, slog.LevelInfo)

type fieldsKey struct{}

// With returns a context whose logger carries the given key-value pairs on every line. A key
// the context's logger already carries is not added again: JSON lines keep unique keys.
func With(ctx context.Context, args ...any) context.Context {
	// The keys carried so far: a few, so a slice (a map cost a third of this call).
	have, _ := ctx.Value(fieldsKey{}).([]string)
	next := have[:len(have):len(have)] // appending copies: have is shared
	var keep []any
	for i := 0; i+1 < len(args); i += 2 {
		k, ok := args[i].(string)
		if !ok {
			keep = append(keep, args[i], args[i+1])
			continue
		}
		if slices.Contains(next, k) {
			continue
		}
		next = append(next, k)
		keep = append(keep, k, args[i+1])
	}
	if len(keep) == 0 {
		return ctx
	}
	l := Logger(ctx).With(keep...)
	return context.WithValue(context.WithValue(ctx, loggerKey{}, l), fieldsKey{}, next)
}

// Log keys of a cluster's nodes.
const (
	KeyNode          = "node"              // the cluster node that logged the line (every line of a node's)
	KeyNodeTo        = "node.to"           // the node a request, a create or a sandbox goes to
	KeyNodeOther     = "node.other"        // another node a line is about (one lost, one a sandbox left)
	KeyNodeLostAt    = "node.lost_at"      // when the cluster declared the node lost
	KeyNodeHeartbeat = "node.heartbeat_at" // the node's last lease renewal
	KeyNodeSandboxes = "node.sandboxes"    // sandboxes the node held
)

// Log keys of disk space and file modes.
const (
	KeyDiskFreeBytes  = "disk.free_bytes"  // free bytes on a store's disk
	KeyDiskFloorBytes = "disk.floor_bytes" // the free space a store keeps
	KeyModeBefore     = "mode_before"      // a file mode Cove changed, as it was
)
