package api_test

import (
	"github.com/cove-dev/cove/internal/control/api"
	"github.com/cove-dev/cove/internal/control/orchestrator"
	"github.com/cove-dev/cove/internal/store"
)

// The real orchestrator and key store plug in as they are.
var (
	_ api.Sandboxes     = (*orchestrator.Orchestrator)(nil)
	_ api.Authenticator = (store.Keys)(nil)
)
