package orchestrator

import (
	"context"
	"errors"

	"github.com/cove-dev/cove/internal/store"
	cove "github.com/cove-dev/cove/sdk"
)

// This file: the team.limit.reached events of the bounds the orchestrator enforces (team
// quotas, the host's open files, volumes): the refusal the client got, told to the team too.

// quotaLimits names each QuotaError's limit as the event does.
var quotaLimits = map[string]string{
	quotaSandboxes: cove.LimitTeamSandboxes,
	quotaVCPUs:     cove.LimitTeamVCPUs,
	quotaMemory:    cove.LimitTeamMemory,
	quotaCreates:   cove.LimitTeamCreates,
}

// quotaRefused tells sb's team that one of its quotas refused its create (err, a
// *QuotaError).
func (o *Orchestrator) quotaRefused(ctx context.Context, sb *store.Sandbox, err error) {
	var qe *QuotaError
	if errors.As(err, &qe) {
		o.limits.Reached(ctx, sb.TeamID, "", sb.TemplateID, quotaLimits[qe.Limit], err.Error())
	}
}
