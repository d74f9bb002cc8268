package cove

// IAM is E2B's SandboxIam, create's workload identity: named tokens the sandbox's network
// rules use as IdentityTokenPlaceholder(name). Cove's egress proxy puts a freshly signed,
// short-lived token in on the host side, so no token ever enters the sandbox. Relying parties
// verify it against the server's OpenID Connect discovery document
// (<API URL>/.well-known/openid-configuration) and its key set.
type IAM struct {
	Tokens map[string]IAMToken `json:"tokens,omitempty"`
}

// IAMToken is one named workload token: its audience (the token's aud, as given) and type.
type IAMToken struct {
	Audience  string `json:"audience"`
	TokenType string `json:"tokenType"`
}

// TokenTypeJWTSVID is the token type Cove issues: a JWT whose subject is the sandbox's
// SPIFFE ID (spiffe://<issuer host>/team/<team>/template/<template>/sandbox/<id>).
const TokenTypeJWTSVID = "JWT-SVID"

// IdentityTokenPlaceholder is what a network rule's header value writes to use the workload
// token name registered in SandboxOptions.IAM, e.g. "Bearer " + IdentityTokenPlaceholder("aws").
func IdentityTokenPlaceholder(name string) string { return "${e2b.identity.tokens." + name + "}" }
