package api

import (
	"context"
	"fmt"
	"net/http"
	"sort"

	"github.com/cove-dev/cove/internal/control/oidc"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/store"
	cove "github.com/cove-dev/cove/sdk"
	"github.com/cove-dev/cove/sdk/reason"
)

// Identity is the workload identity issuer (oidc.Issuer): create registers a sandbox's named
// tokens with it, and it publishes the documents relying parties verify them with.
type Identity interface {
	Register(ctx context.Context, sandboxID string, tokens []store.IdentityToken) error
	Inherit(ctx context.Context, from, to string) error
	Forget(ctx context.Context, sandboxID string) error
	Discovery() oidc.Discovery
	JWKS(ctx context.Context) (oidc.JWKS, error)
}

// identityRoutes serves the issuer's discovery document and key set, without a key: clouds
// fetch them to verify the tokens.
func (a *api) identityRoutes() {
	a.public("GET "+oidc.DiscoveryPath, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=300")
		writeJSON(w, http.StatusOK, a.cfg.Identity.Discovery())
	})
	a.public("GET "+oidc.JWKSPath, func(w http.ResponseWriter, r *http.Request) {
		set, err := a.cfg.Identity.JWKS(r.Context())
		if err != nil {
			a.fail(w, r, fmt.Errorf("identity key set: %w", err))
			return
		}
		// Short: a rotated key must reach relying parties before tokens it signs do.
		w.Header().Set("Cache-Control", "public, max-age=60")
		writeJSON(w, http.StatusOK, set)
	})
}

// parseIAM reads create's iam: the named token specs to register, checked before the
// sandbox is made so a bad one leaves nothing behind.
func (a *api) parseIAM(iam *cove.IAM) ([]store.IdentityToken, error) {
	if iam == nil || len(iam.Tokens) == 0 {
		return nil, nil
	}
	if a.cfg.Identity == nil {
		return nil, fmt.Errorf("%w: iam: this server issues no workload identity tokens", errBadRequest)
	}
	tokens := make([]store.IdentityToken, 0, len(iam.Tokens))
	for name, t := range iam.Tokens {
		tokens = append(tokens, store.IdentityToken{Name: name, Audience: t.Audience, TokenType: t.TokenType})
	}
	sort.Slice(tokens, func(i, j int) bool { return tokens[i].Name < tokens[j].Name })
	if err := oidc.Validate(tokens); err != nil {
		return nil, err
	}
	return tokens, nil
}

// registerIAM registers the new sandbox's tokens; when that fails the sandbox is killed, so a
// create either answers with a sandbox whose tokens work or fails whole.
func (a *api) registerIAM(ctx context.Context, c caller, sb *store.Sandbox, tokens []store.IdentityToken) error {
	if len(tokens) == 0 {
		return nil
	}
	if err := a.cfg.Identity.Register(ctx, sb.ID, tokens); err != nil {
		a.killWithoutIAM(ctx, c, sb.ID)
		return fmt.Errorf("create sandbox: iam: %w", err)
	}
	return nil
}

// inheritIAM gives a fork its source's tokens; when that fails the fork is killed.
func (a *api) inheritIAM(ctx context.Context, c caller, from string, fork *store.Sandbox) error {
	if a.cfg.Identity == nil {
		return nil
	}
	if err := a.cfg.Identity.Inherit(ctx, from, fork.ID); err != nil {
		a.killWithoutIAM(ctx, c, fork.ID)
		return fmt.Errorf("fork %s: iam: %w", from, err)
	}
	return nil
}

// killWithoutIAM kills sandbox id whose tokens could not be registered: it must not run with
// rules naming tokens it cannot get.
func (a *api) killWithoutIAM(ctx context.Context, c caller, id string) {
	if err := a.cfg.Sandboxes.Kill(context.WithoutCancel(ctx), c.team.ID, id, reason.KillRequest, c.key.ID); err != nil {
		telemetry.Logger(ctx).Warn("sandbox not killed after its identity tokens failed", telemetry.KeySandboxID, id, telemetry.KeyError, err.Error())
	}
}

// forgetIAM drops a killed sandbox's tokens at once (the issuer's sweep would in a minute).
func (a *api) forgetIAM(ctx context.Context, id string) {
	if a.cfg.Identity == nil {
		return
	}
	if err := a.cfg.Identity.Forget(ctx, id); err != nil {
		telemetry.Logger(ctx).Warn("identity tokens not forgotten", telemetry.KeySandboxID, id, telemetry.KeyError, err.Error())
	}
}
