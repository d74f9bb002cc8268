package api

import (
	"context"

	"github.com/cove-dev/cove/internal/store"
	cove "github.com/cove-dev/cove/sdk"
)

// newSandboxJSON is E2B's Sandbox: the answer to create, connect and resume. It is the
// SDK's type, so the server and the Go SDK cannot drift.
type newSandboxJSON = cove.CreatedSandbox

// sandboxJSON is E2B's SandboxDetail (GET /sandboxes/{id}) and, without the access token,
// its ListedSandbox: the SDK's SandboxInfo.
type sandboxJSON = cove.SandboxInfo

func (a *api) newSandbox(sb *store.Sandbox) newSandboxJSON {
	return newSandboxJSON{
		SandboxID:          sb.ID,
		TemplateID:         sb.TemplateID,
		Alias:              sb.Alias,
		ClientID:           clientOf(sb),
		EnvdVersion:        envdVersion(sb),
		EnvdAccessToken:    accessToken(sb),
		Domain:             a.domain(),
		TrafficAccessToken: a.trafficToken(sb.ID),
	}
}

// trafficToken is the token of a sandbox's private ports, for its create, connect and
// resume answers; "" when its ports are public.
func (a *api) trafficToken(id string) string {
	if a.cfg.Networks == nil {
		return ""
	}
	return a.cfg.Networks.TrafficToken(id)
}

// detail renders a sandbox; withToken adds its envd access token (only GET of one sandbox
// returns it, never a listing).
func (a *api) detail(sb *store.Sandbox, withToken bool) sandboxJSON {
	md := sb.Metadata
	if md == nil {
		md = map[string]string{}
	}
	out := sandboxJSON{
		SandboxID:           sb.ID,
		TemplateID:          sb.TemplateID,
		Alias:               sb.Alias,
		ClientID:            clientOf(sb),
		Runtime:             sb.Runtime,
		StartedAt:           sb.StartedAt.UTC(),
		EndAt:               sb.EndAt.UTC(),
		State:               cove.SandboxState(sb.State),
		CPUCount:            sb.CPUCount,
		MemoryMB:            sb.MemoryMB,
		DiskSizeMB:          sb.DiskSizeMB,
		EnvdVersion:         envdVersion(sb),
		Metadata:            md,
		Domain:              a.domain(),
		AllowInternetAccess: sb.AllowInternet,
	}
	if withToken {
		out.EnvdAccessToken = accessToken(sb)
	}
	return out
}

// details renders a listing; each entry carries its volumeMounts, as E2B's ListedSandbox does.
func (a *api) details(ctx context.Context, sbs []*store.Sandbox) ([]sandboxJSON, error) {
	out := make([]sandboxJSON, 0, len(sbs))
	for _, sb := range sbs {
		d := a.detail(sb, false)
		mounts, err := a.volumeMountsOf(ctx, sb.TeamID, sb.ID)
		if err != nil {
			return nil, err
		}
		d.VolumeMounts = mounts
		out = append(out, d)
	}
	return out, nil
}

// domain is null when Cove has no sandbox domain, so SDKs keep their configured URLs.
func (a *api) domain() *string {
	if a.cfg.Domain == "" {
		return nil
	}
	d := a.cfg.Domain
	return &d
}

func envdVersion(sb *store.Sandbox) string {
	if sb.EnvdVersion != "" {
		return sb.EnvdVersion
	}
	return EnvdVersion
}

func accessToken(sb *store.Sandbox) string {
	if !sb.Secure {
		return ""
	}
	return sb.EnvdAccessToken
}
