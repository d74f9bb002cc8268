package server

import (
	"context"
	"fmt"
	"net"

	"github.com/cove-dev/cove/internal/control/oidc"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/sandbox/egress"
)

var _ egress.IdentityTokens = (*oidc.Issuer)(nil)

// startIdentity opens the workload identity issuer (create's iam): its keys in the store,
// sealed by the server's vault, and its URL the API's (--oidc-issuer, or the listener's).
func (s *instance) startIdentity(ctx context.Context) error {
	issuerURL := s.cfg.OIDCIssuer
	if issuerURL == "" {
		scheme := "http://"
		if s.cfg.TLSCert != "" || s.cfg.TLSSelfSigned {
			scheme = "https://"
		}
		issuerURL = scheme + s.ln.Addr().String()
		if tcp, ok := s.ln.Addr().(*net.TCPAddr); ok && tcp.IP.IsUnspecified() {
			s.cfg.Logger.Warn("the workload identity issuer's URL is the listen address, which relying parties cannot reach: set --oidc-issuer to the API's external URL",
				telemetry.KeyIdentityIssuer, issuerURL)
		}
	}
	issuer, err := oidc.New(telemetry.WithLogger(ctx, s.cfg.Logger), oidc.Config{
		Store: s.db, Records: s.db, Vault: s.vault, URL: issuerURL,
		TokenTTL: s.cfg.OIDCTokenTTL, Rotation: s.cfg.OIDCKeyRotation,
	})
	if err != nil {
		return fmt.Errorf("identity issuer: %w", err)
	}
	s.issuer = issuer
	if s.netman != nil {
		// The egress proxy resolves ${e2b.identity.tokens.NAME} with the issuer's tokens.
		s.netman.SetIdentityTokens(issuer)
	}
	go issuer.Run(ctx)
	return nil
}
