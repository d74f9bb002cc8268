package proxy_test

import (
	"github.com/cove-dev/cove/internal/control/orchestrator"
	"github.com/cove-dev/cove/internal/control/proxy"
)

// The real orchestrator plugs in as it is.
var _ proxy.Backend = (*orchestrator.Orchestrator)(nil)
