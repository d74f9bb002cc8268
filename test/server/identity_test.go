package server

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/cove-dev/cove/internal/covetest"
)

// TestWorkloadIdentityIssuer: a server is an OpenID Connect issuer at its own URL, create's
// iam (the body E2B's SDK 2.51 sends) registers named tokens and refuses a bad one naming
// the field, and the signing key, kept sealed in the store, is the same after a restart.
func TestWorkloadIdentityIssuer(t *testing.T) {
	s := covetest.Start(t, "")
	a := client{t: t, url: s.URL, key: s.Key}
	kids := func() []string {
		t.Helper()
		var doc struct {
			Issuer  string `json:"issuer"`
			JWKSURI string `json:"jwks_uri"`
		}
		if code := getJSON(t, s, "/.well-known/openid-configuration", &doc); code != http.StatusOK || doc.Issuer != s.URL || doc.JWKSURI != s.URL+"/.well-known/jwks.json" {
			t.Fatalf("discovery: %d %+v; want the issuer %s", code, doc, s.URL)
		}
		var set struct {
			Keys []struct {
				Kid string `json:"kid"`
			} `json:"keys"`
		}
		if code := getJSON(t, s, strings.TrimPrefix(doc.JWKSURI, s.URL), &set); code != http.StatusOK || len(set.Keys) == 0 {
			t.Fatalf("key set: %d %+v", code, set)
		}
		var out []string
		for _, k := range set.Keys {
			out = append(out, k.Kid)
		}
		return out
	}
	before := kids()

	iam := func(tokenType string) map[string]any {
		return map[string]any{"templateID": "base", "iam": map[string]any{"tokens": map[string]any{
			"aws": map[string]string{"audience": "sts.amazonaws.com", "tokenType": tokenType}}}}
	}
	t.Run("a create with iam makes the sandbox", func(t *testing.T) {
		code, out, _ := a.do(http.MethodPost, "/v2/sandboxes", iam("JWT-SVID"))
		if code != http.StatusCreated {
			t.Fatalf("create: %d %v", code, out)
		}
		if code, _, _ := a.do(http.MethodDelete, "/sandboxes/"+out["sandboxID"].(string), nil); code != http.StatusNoContent {
			t.Fatalf("kill: %d", code)
		}
	})
	t.Run("an unknown token type is a 400 naming the field", func(t *testing.T) {
		code, out, _ := a.do(http.MethodPost, "/v2/sandboxes", iam("oidc"))
		if msg, _ := out["message"].(string); code != http.StatusBadRequest || !strings.Contains(msg, "iam.tokens.aws.tokenType") {
			t.Fatalf("create: %d %v; want a 400 naming iam.tokens.aws.tokenType", code, out)
		}
	})
	t.Run("the signing key is kept across a restart", func(t *testing.T) {
		s.Stop()
		s.Restart()
		if after := kids(); !slices.Equal(after, before) {
			t.Fatalf("keys after a restart %v, before %v", after, before)
		}
	})
}
