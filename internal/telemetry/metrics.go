package telemetry

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/cove-dev/cove/reason"
)

// Registry holds every Cove metric once Metrics has been called. Names live here and nowhere
// else: a cove_ prefix, base units, _total on counters, and bounded labels only (never a
// sandbox id).
var Registry = prometheus.NewRegistry()

var registerOnce sync.Once

// Metrics registers Cove's metrics and the Go and process collectors, once, and returns the
// registry. It is not done at init: `cove envd` shares the binary and must stay small.
func Metrics() *prometheus.Registry {
	registerOnce.Do(register)
	return Registry
}

// Cove's metrics.
var (
	NetworkDenied = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cove_network_denied_packets_total", Help: "Sandbox packets refused by Cove's network rules and logged (at most 10 a second per rule of a sandbox), by rule kind.",
	}, []string{"kind"})
	SandboxesCreated = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cove_sandboxes_created_total", Help: "Sandboxes created, by template.",
	}, []string{"template"})
	SandboxesKilled = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cove_sandboxes_killed_total", Help: "Sandboxes killed, by kill reason.",
	}, []string{"kill_reason"})
	SandboxCreateFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cove_sandbox_create_failures_total", Help: "Sandbox creations that failed, by stage.",
	}, []string{"stage"})
	SandboxesLive = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "cove_sandboxes", Help: "Sandboxes alive now, by state.",
	}, []string{"state"})
	SandboxCreateSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "cove_sandbox_create_seconds", Help: "Time from a create call to envd ready.",
		Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5},
	})
	SandboxTransitionSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "cove_sandbox_transition_seconds", Help: "Time to pause, resume or kill a sandbox.",
		Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1},
	}, []string{"transition"})
	ProxyRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cove_proxy_requests_total", Help: "Requests proxied to sandboxes, by outcome.",
	}, []string{"outcome"})
	APIRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cove_api_requests_total", Help: "REST API requests, by route and status class.",
	}, []string{"route", "code"})
	LogLinesDropped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cove_log_lines_dropped_total", Help: "Sandbox log lines dropped, by reason (envd: by envd's budgets, counted in command records).",
	}, []string{"reason"})
	LogBytesDropped = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "cove_log_bytes_dropped_total", Help: "Sandbox output bytes envd did not collect as lines: over a byte budget, or binary.",
	})
)

func register() {
	Registry.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		SandboxesCreated, SandboxesKilled, SandboxCreateFailures, SandboxesLive,
		SandboxCreateSeconds, SandboxTransitionSeconds, ProxyRequests, APIRequests,
		LogLinesDropped, LogBytesDropped,
	)
	for _, r := range reason.KillReasons {
		SandboxesKilled.WithLabelValues(r.String())
	}
	Registry.MustRegister(NetworkDenied)
}
