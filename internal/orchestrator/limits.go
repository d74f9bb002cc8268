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
	"concurrent sandboxes": cove.LimitTeamSandboxes,
	"vCPUs":                cove.LimitTeamVCPUs,
	"memory MB":            cove.LimitTeamMemory,
	"creates per second":   cove.LimitTeamCreates,
}

// refused tells sb's team that a bound refused its create (err, a *QuotaError or the host
// files' 503).
func (o *Orchestrator) refused(ctx context.Context, sb *store.Sandbox, err error, limit string) {
	var qe *QuotaError
	if errors.As(err, &qe) {
		limit = quotaLimits[qe.Limit]
	}
	if limit != "" {
		o.limits.Reached(ctx, sb.TeamID, "", sb.TemplateID, limit, err.Error())
	}
}
