package server

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha256"
	"encoding/asn1"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/covetest"
	"github.com/cove-dev/cove/internal/sandbox/network/nettest"
	cove "github.com/cove-dev/cove/sdk"
)

// TestWorkloadIdentityTokenNeverEntersTheSandbox: a sandbox registers a workload token at
// create (iam) and a header rule names it; the test host in a network namespace receives a
// JWT that verifies against the key set Cove publishes at its own URL, with the audience
// asked for and a subject naming the team, template and sandbox. Nothing in the sandbox nor
// in any of Cove's stores holds the token.
func TestWorkloadIdentityTokenNeverEntersTheSandbox(t *testing.T) {
	in := nettest.New(t)
	in.SetName("web.test", in.Addr)
	caFile := filepath.Join(t.TempDir(), "upstream-ca.pem")
	if err := os.WriteFile(caFile, in.CAPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	s := covetest.StartWith(t, "", covetest.Options{OnStop: "kill", Args: []string{"--network-dns", in.DNS().String(), "--network-upstream-ca", caFile}})
	c := cove.NewClient(cove.Config{APIURL: s.URL, APIKey: s.Key})
	ctx := context.Background()
	sb, err := c.Create(ctx, cove.SandboxOptions{
		IAM: &cove.IAM{Tokens: map[string]cove.IAMToken{"web": {Audience: "web.test", TokenType: cove.TokenTypeJWTSVID}}},
		Network: &cove.NetworkRules{Rules: map[string][]cove.Rule{"web.test": {{Transform: cove.Transform{
			Headers: map[string]string{"Authorization": "Bearer " + cove.IdentityTokenPlaceholder("web")}}}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Kill(context.Background()) })

	if out, code := curl(t, sb, "https://web.test/with-identity"); code != 0 {
		t.Fatalf("curl exited %d: %s", code, out)
	}
	var token string
	for _, r := range in.Requests() {
		if r.Path == "/with-identity" && r.TLS {
			token, _ = strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		}
	}
	t.Run("the test host receives a token that verifies against Cove's key set", func(t *testing.T) {
		claims, err := verifyAgainstIssuer(s.URL, token)
		if err != nil {
			t.Fatalf("the token %q does not verify: %v", token, err)
		}
		info, err := sb.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		wantSub := "/template/" + info.TemplateID + "/sandbox/" + sb.ID
		if claims.Iss != s.URL || claims.Aud != "web.test" || !strings.HasSuffix(claims.Sub, wantSub) || !strings.Contains(claims.Sub, "/team/") {
			t.Fatalf("claims %+v; want iss %s, aud web.test and a subject ending in %s", claims, s.URL, wantSub)
		}
		if life := claims.Exp - claims.Iat; life != int64((15 * time.Minute).Seconds()) {
			t.Fatalf("the token lives %d s, want 15 minutes", life)
		}
	})
	// The token in two halves, so that no command line of the check holds the whole.
	half1, half2 := token[:len(token)/2], token[len(token)/2:]
	t.Run("env, /proc and the files of the sandbox do not hold it", func(t *testing.T) {
		script := fmt.Sprintf(`printf '%%s%%s' '%s' '%s' > /dev/shm/p; `+
			`(env; cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | tr '\0' '\n'; `+
			`grep -rIsl -F -f /dev/shm/p /etc /home /tmp /root /var /usr/local /.cove 2>/dev/null) | grep -c -F -f /dev/shm/p`, half1, half2)
		res, err := sb.Commands.Run(ctx, script)
		var exit *cove.CommandExitError
		if !errors.As(err, &exit) || exit.ExitCode != 1 || strings.TrimSpace(res.Stdout) != "0" {
			t.Fatalf("the token is visible in the sandbox: %v, stdout %q", err, res.Stdout)
		}
	})
	t.Run("no store, log or record of Cove holds it", func(t *testing.T) {
		for name, text := range collected(t, s, sb.ID) {
			if strings.Contains(text, token) {
				t.Errorf("%s holds the token", name)
			}
		}
		if strings.Contains(s.Logs(), token) {
			t.Error("the server's output holds the token")
		}
		_ = filepath.WalkDir(s.DataDir, func(path string, d os.DirEntry, err error) error {
			if err != nil || !d.Type().IsRegular() {
				return nil
			}
			if b, err := os.ReadFile(path); err == nil && strings.Contains(string(b), token) {
				t.Errorf("%s holds the token", path)
			}
			return nil
		})
	})
}

type identityClaims struct {
	Iss, Sub, Aud string
	Iat, Exp, Nbf int64
}

// verifyAgainstIssuer checks token as a relying party that trusts issuer does: discovery,
// then the key set it names, then the ES256 signature by the header's kid and the claims'
// times.
func verifyAgainstIssuer(issuer, token string) (identityClaims, error) {
	var claims identityClaims
	fetch := func(url string, v any) error {
		res, err := http.Get(url)
		if err != nil {
			return err
		}
		defer res.Body.Close()
		if res.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", url, res.Status)
		}
		return json.NewDecoder(res.Body).Decode(v)
	}
	var doc struct {
		Issuer  string `json:"issuer"`
		JWKSURI string `json:"jwks_uri"`
	}
	if err := fetch(issuer+"/.well-known/openid-configuration", &doc); err != nil {
		return claims, err
	}
	var set struct {
		Keys []struct{ Kid, Kty, Crv, X, Y string } `json:"keys"`
	}
	if err := fetch(doc.JWKSURI, &set); err != nil {
		return claims, err
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return claims, errors.New("not a compact JWS")
	}
	b64 := base64.RawURLEncoding
	var hdr struct{ Alg, Kid string }
	hb, _ := b64.DecodeString(parts[0])
	pb, _ := b64.DecodeString(parts[1])
	sig, _ := b64.DecodeString(parts[2])
	if err := errors.Join(json.Unmarshal(hb, &hdr), json.Unmarshal(pb, &claims)); err != nil {
		return claims, err
	}
	if hdr.Alg != "ES256" || len(sig) != 64 {
		return claims, fmt.Errorf("alg %s, a %d-byte signature", hdr.Alg, len(sig))
	}
	for _, k := range set.Keys {
		if k.Kid != hdr.Kid || k.Kty != "EC" || k.Crv != "P-256" {
			continue
		}
		x, _ := b64.DecodeString(k.X)
		y, _ := b64.DecodeString(k.Y)
		pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), append(append([]byte{4}, x...), y...))
		if err != nil {
			return claims, err
		}
		der, _ := asn1.Marshal(struct{ R, S *big.Int }{new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])})
		digest := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
		if !ecdsa.VerifyASN1(pub, digest[:], der) {
			return claims, errors.New("the signature does not verify")
		}
		if now := time.Now().Unix(); now < claims.Nbf-60 || now >= claims.Exp {
			return claims, fmt.Errorf("not valid now: nbf %d exp %d", claims.Nbf, claims.Exp)
		}
		return claims, nil
	}
	return claims, fmt.Errorf("kid %s is not in the key set %s", hdr.Kid, doc.JWKSURI)
}
