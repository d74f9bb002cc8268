package reason

// KillReason says why a sandbox was killed. The empty value reads as KillUnknown.
type KillReason string

// The kill reasons. E2B's set, extended with Cove's own.
const (
	KillUnknown         KillReason = "unknown"
	KillRequest         KillReason = "request"
	KillTimeout         KillReason = "timeout"
	KillAdmin           KillReason = "admin"
	KillOrphaned        KillReason = "orphaned"
	KillTemplateMissing KillReason = "template_missing"
	KillResumeFailed    KillReason = "resume_failed"
	KillOOM             KillReason = "oom"
	KillEnvdExited      KillReason = "envd_exited"
	KillServerShutdown  KillReason = "server_shutdown"
	// KillNodeLost: the cluster node that ran the sandbox stopped renewing its lease (killed,
	// powered off, cut off); the sandbox is declared dead wherever it may still run.
	KillNodeLost KillReason = "node_lost"
)

// KillReasons lists every KillReason, for metrics that pre-declare their label values.
var KillReasons = []KillReason{
	KillUnknown, KillRequest, KillTimeout, KillAdmin, KillOrphaned, KillTemplateMissing,
	KillResumeFailed, KillOOM, KillEnvdExited, KillServerShutdown, KillNodeLost,
}

func (k KillReason) String() string {
	if k == "" {
		return string(KillUnknown)
	}
	return string(k)
}

// ParseKillReason returns the KillReason named s; "" parses as KillUnknown.
func ParseKillReason(s string) (KillReason, error) {
	if s == "" {
		return KillUnknown, nil
	}
	return parse("kill reason", s, KillReasons)
}
