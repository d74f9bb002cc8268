package proxy_test

import (
	"github.com/cove-dev/cove/internal/orchestrator"
	"github.com/cove-dev/cove/internal/proxy"
)

// The real orchestrator plugs in as it is.
var _ proxy.Backend = (*orchestrator.Orchestrator)(nil)
