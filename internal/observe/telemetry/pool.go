package telemetry

import "github.com/prometheus/client_golang/prometheus"

// Warm pools (internal/control/orchestrator/pool.go): started, ready sandboxes kept per template.
var (
	PoolReady = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "cove_pool_ready", Help: "Warm pool sandboxes started and ready to be claimed, by template.",
	}, []string{"template"})
	PoolTarget = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "cove_pool_target", Help: "Warm pool size asked for, by template.",
	}, []string{"template"})
	PoolClaims = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cove_pool_claims_total", Help: "Creates of a pooled template, by whether a pooled sandbox served them (hit) or the cold path did (miss).",
	}, []string{"template", "result"})
	PoolBoots = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cove_pool_boots_total", Help: "Sandboxes started to refill a warm pool, by template and result (ok, failed).",
	}, []string{"template", "result"})
	PoolDiscarded = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cove_pool_discarded_total", Help: "Pooled sandboxes destroyed unclaimed, by template and why (stale, resized, stopped, broken).",
	}, []string{"template", "reason"})
)

// Log keys of the pools.
const (
	KeyPoolSize    = "pool.size"
	KeyPooled      = "pooled"
	KeyPooledForMS = "pooled_for_ms"
	// A claim's steps, in ms: quota, secrets kept, network rules, envd's /init, the record,
	// the created event.
	KeyClaimQuotaMS   = "claim.quota_ms"
	KeyClaimSecretsMS = "claim.secrets_ms"
	KeyClaimNetworkMS = "claim.network_ms"
	KeyClaimInitMS    = "claim.init_ms"
	KeyClaimStoreMS   = "claim.store_ms"
	KeyClaimEventMS   = "claim.event_ms"
)

// Pool claim results and discard reasons: closed sets.
const (
	PoolHit  = "hit"
	PoolMiss = "miss"

	PoolBootOK     = "ok"
	PoolBootFailed = "failed"

	PoolStale   = "stale"   // the template was rebuilt or removed
	PoolResized = "resized" // the pool was made smaller
	PoolStopped = "stopped" // the server stopped
	PoolBroken  = "broken"  // its claim failed
)
