package main

import (
	"github.com/spf13/cobra"

	"github.com/cove-dev/cove/internal/control/oidc"
	"github.com/cove-dev/cove/internal/control/server"
)

// oidcFlags registers the workload identity issuer's flags (create's iam).
func oidcFlags(cmd *cobra.Command, cfg *server.Config) {
	f := cmd.Flags()
	f.StringVar(&cfg.OIDCIssuer, "oidc-issuer", envOr("COVE_OIDC_ISSUER", ""), "the workload identity issuer's URL: the API's external URL (https://host[:port]), the tokens' iss, where clouds fetch "+oidc.DiscoveryPath+"; http://<listen address> when empty [$COVE_OIDC_ISSUER]")
	f.DurationVar(&cfg.OIDCTokenTTL, "oidc-token-ttl", oidc.DefaultTokenTTL, "how long a workload identity token is valid")
	f.DurationVar(&cfg.OIDCKeyRotation, "oidc-key-rotation", oidc.DefaultRotation, "how long a workload identity signing key signs before a new one takes over (the old one stays published until its tokens expire)")
}
