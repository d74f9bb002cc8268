package oidc

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha256"
	"crypto/x509"
	"encoding/asn1"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/control/vault"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/store/sqlite"
)

// clock is a settable clock, the one fake: time is a boundary Cove does not own.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *clock) Add(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

// fixture is an issuer over a real SQLite store and a real vault, with one running sandbox.
type fixture struct {
	db      *sqlite.DB
	dbPath  string
	vault   *vault.Vault
	clock   *clock
	issuer  *Issuer
	sandbox *store.Sandbox
}

const testURL = "https://cove.example.test"

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	f := &fixture{dbPath: filepath.Join(dir, "cove.db"), clock: &clock{now: time.Now().Round(time.Second)}}
	var err error
	if f.db, err = sqlite.Open(ctx, f.dbPath); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.db.Close() })
	if f.vault, err = vault.Open(filepath.Join(dir, "vault")); err != nil {
		t.Fatal(err)
	}
	team, err := f.db.CreateTeam(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	f.sandbox = &store.Sandbox{ID: "sbx1", TeamID: team.ID, TemplateID: "base", State: store.StateRunning, StartedAt: f.clock.Now(), EndAt: f.clock.Now().Add(time.Hour), UpdatedAt: f.clock.Now()}
	if err := f.db.InsertSandbox(ctx, f.sandbox); err != nil {
		t.Fatal(err)
	}
	f.issuer = f.open(t, f.vault)
	if err := f.issuer.Register(ctx, f.sandbox.ID, []store.IdentityToken{{Name: "aws", Audience: "sts.amazonaws.com", TokenType: "JWT-SVID"}}); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) open(t *testing.T, v *vault.Vault) *Issuer {
	t.Helper()
	i, err := New(context.Background(), Config{Store: f.db, Records: f.db, Vault: v, URL: testURL + "/", TokenTTL: 15 * time.Minute, Rotation: 24 * time.Hour, Now: f.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	return i
}

func (f *fixture) token(t *testing.T, name string) string {
	t.Helper()
	tok, err := f.issuer.Token(context.Background(), f.sandbox.ID, name)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func (f *fixture) jwks(t *testing.T) JWKS {
	t.Helper()
	set, err := f.issuer.JWKS(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// verify checks tok as a relying party does, against set alone: the signature by the key
// its kid names, then the claims at now. It returns the header's kid and the claims.
func verify(tok string, set JWKS, audience string, now time.Time) (string, Claims, error) {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return "", Claims{}, errors.New("not a compact JWS")
	}
	var h header
	var c Claims
	hb, err1 := b64.DecodeString(parts[0])
	pb, err2 := b64.DecodeString(parts[1])
	sig, err3 := b64.DecodeString(parts[2])
	if err := errors.Join(err1, err2, err3); err != nil {
		return "", Claims{}, err
	}
	if err := errors.Join(json.Unmarshal(hb, &h), json.Unmarshal(pb, &c)); err != nil {
		return "", Claims{}, err
	}
	if h.Alg != "ES256" || len(sig) != 64 {
		return "", Claims{}, fmt.Errorf("alg %q with a %d-byte signature", h.Alg, len(sig))
	}
	var jwk *JWK
	for n := range set.Keys {
		if set.Keys[n].Kid == h.Kid {
			jwk = &set.Keys[n]
		}
	}
	if jwk == nil {
		return h.Kid, c, fmt.Errorf("kid %s is not in the key set", h.Kid)
	}
	x, _ := b64.DecodeString(jwk.X)
	y, _ := b64.DecodeString(jwk.Y)
	pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), append(append([]byte{4}, x...), y...))
	if err != nil {
		return h.Kid, c, err
	}
	der, _ := asn1.Marshal(struct{ R, S *big.Int }{new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])})
	digest := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if !ecdsa.VerifyASN1(pub, digest[:], der) {
		return h.Kid, c, errors.New("bad signature")
	}
	switch {
	case c.Issuer != testURL:
		return h.Kid, c, fmt.Errorf("iss %q", c.Issuer)
	case c.Audience != audience:
		return h.Kid, c, fmt.Errorf("aud %q", c.Audience)
	case now.Unix() < c.NotBefore || now.Unix() >= c.Expiry:
		return h.Kid, c, fmt.Errorf("not valid at %d: nbf %d exp %d", now.Unix(), c.NotBefore, c.Expiry)
	}
	return h.Kid, c, nil
}

func TestTokens(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("a token verifies against the issuer's own key set and names the sandbox", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t)
		tok := f.token(t, "aws")
		kid, c, err := verify(tok, f.jwks(t), "sts.amazonaws.com", f.clock.Now())
		if err != nil {
			t.Fatal(err)
		}
		want := "spiffe://cove.example.test/team/" + f.sandbox.TeamID + "/template/base/sandbox/sbx1"
		if c.Subject != want || kid == "" || c.ID == "" || c.Expiry-c.IssuedAt != 900 || c.NotBefore != c.IssuedAt {
			t.Fatalf("claims %+v kid %q; want sub %s, a kid, a jti and 15 minutes of life", c, kid, want)
		}
		if _, _, err := verify(tok, f.jwks(t), "other", f.clock.Now()); err == nil {
			t.Fatal("the token verified for another audience")
		}
		forged := tok[:len(tok)-4] + "AAAA"
		if _, _, err := verify(forged, f.jwks(t), "sts.amazonaws.com", f.clock.Now()); err == nil {
			t.Fatal("a forged signature verified")
		}
	})

	t.Run("a token is reused until a third of its life is left, then a new one is signed", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t)
		first := f.token(t, "aws")
		f.clock.Add(9 * time.Minute)
		if again := f.token(t, "aws"); again != first {
			t.Fatal("a token with 6 of its 15 minutes left was not reused")
		}
		f.clock.Add(2 * time.Minute)
		fresh := f.token(t, "aws")
		if fresh == first {
			t.Fatal("a token with 4 of its 15 minutes left was handed out again")
		}
		if _, _, err := verify(fresh, f.jwks(t), "sts.amazonaws.com", f.clock.Now()); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("an unregistered name or a killed sandbox gets no token", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t)
		if _, err := f.issuer.Token(ctx, f.sandbox.ID, "gcp"); !errors.Is(err, ErrNoToken) {
			t.Fatalf("unregistered name: %v, want ErrNoToken", err)
		}
		if _, err := f.issuer.Token(ctx, "nosuch", "aws"); !errors.Is(err, ErrNoToken) {
			t.Fatalf("unknown sandbox: %v, want ErrNoToken", err)
		}
		f.token(t, "aws") // cached now
		killed := *f.sandbox
		now := f.clock.Now()
		killed.State, killed.KilledAt = store.StateKilled, &now
		if err := f.db.UpdateSandbox(ctx, &killed); err != nil {
			t.Fatal(err)
		}
		if _, err := f.issuer.Token(ctx, f.sandbox.ID, "aws"); !errors.Is(err, ErrNoToken) {
			t.Fatalf("killed sandbox: %v, want ErrNoToken", err)
		}
		if err := f.issuer.Sweep(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := f.db.GetIdentityToken(ctx, f.sandbox.ID, "aws"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("the killed sandbox's registration after a sweep: %v, want it gone", err)
		}
	})

	t.Run("forget drops the registration", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t)
		f.token(t, "aws")
		if err := f.issuer.Forget(ctx, f.sandbox.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := f.issuer.Token(ctx, f.sandbox.ID, "aws"); !errors.Is(err, ErrNoToken) {
			t.Fatalf("after Forget: %v, want ErrNoToken", err)
		}
	})
}

func TestRotation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	old := f.token(t, "aws")
	oldKid, _, err := verify(old, f.jwks(t), "sts.amazonaws.com", f.clock.Now())
	if err != nil {
		t.Fatal(err)
	}

	// A day later the key is due: the next token is signed by a new key, and the old token,
	// still valid for minutes, still verifies against the published set.
	f.clock.Add(24*time.Hour - 10*time.Minute)
	if _, _, err := verify(old, f.jwks(t), "sts.amazonaws.com", f.clock.Now()); err == nil {
		t.Fatal("a token verified after its expiry")
	}
	old = f.token(t, "aws") // signed 10 minutes before the rotation, by the old key
	f.clock.Add(10 * time.Minute)
	fresh := f.token(t, "aws")
	newKid, _, err := verify(fresh, f.jwks(t), "sts.amazonaws.com", f.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	if newKid == oldKid {
		t.Fatalf("the key %s signed past its rotation", oldKid)
	}
	if kid, _, err := verify(old, f.jwks(t), "sts.amazonaws.com", f.clock.Now()); err != nil || kid != oldKid {
		t.Fatalf("a valid token of the retired key %s (kid %s): %v; want it to verify", oldKid, kid, err)
	}
	if n := len(f.jwks(t).Keys); n != 2 {
		t.Fatalf("%d published keys right after a rotation, want 2", n)
	}

	// Once every token of the old key has expired, it leaves the set and the store.
	f.clock.Add(15*time.Minute + leeway + time.Second)
	set := f.jwks(t)
	if len(set.Keys) != 1 || set.Keys[0].Kid != newKid {
		t.Fatalf("published keys %+v once the old key's tokens expired, want only %s", set.Keys, newKid)
	}
	stored, err := f.db.SigningKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(stored) != 1 || stored[0].ID != newKid {
		t.Fatalf("stored keys %d (first %s), want only %s", len(stored), stored[0].ID, newKid)
	}
}

func TestKeysAreSealedInTheStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	tok := f.token(t, "aws")
	priv := f.issuer.keys[0].priv
	scalar, err := priv.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	stored, err := f.db.SigningKeys(ctx)
	if err != nil || len(stored) != 1 {
		t.Fatalf("stored keys %d: %v", len(stored), err)
	}
	if bytes.Contains(stored[0].Sealed, scalar) || bytes.Contains(stored[0].Sealed, pkcs8) {
		t.Fatal("the stored row holds the private key in clear")
	}
	f.db.Close()
	for _, p := range []string{f.dbPath, f.dbPath + "-wal"} {
		b, err := os.ReadFile(p)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		if bytes.Contains(b, scalar) || bytes.Contains(b, []byte(tok)) {
			t.Fatalf("%s holds the private key or a token in clear", p)
		}
	}

	// A restart opens the same key from the store; another vault's key does not open it.
	db, err := sqlite.Open(ctx, f.dbPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	f.db = db
	again := f.open(t, f.vault)
	set, err := again.JWKS(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := verify(tok, set, "sts.amazonaws.com", f.clock.Now()); err != nil || len(set.Keys) != 1 {
		t.Fatalf("after a restart, %d keys and %v; want the same one key", len(set.Keys), err)
	}
	other, err := vault.Open(filepath.Join(t.TempDir(), "vault"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(ctx, Config{Store: db, Records: db, Vault: other, URL: testURL, Now: f.clock.Now}); err == nil {
		t.Fatal("another vault's key opened the stored signing key")
	}
}

func TestNodeVerifiesATokenAgainstTheJWKS(t *testing.T) {
	t.Parallel()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("no node: the interop check needs an independent JWS implementation")
	}
	f := newFixture(t)
	tok := f.token(t, "aws")
	set, err := json.Marshal(f.jwks(t))
	if err != nil {
		t.Fatal(err)
	}
	// Node's crypto reads the JWK and checks the ES256 signature in JOSE's R||S form.
	const script = `
const crypto = require('crypto');
const [tok, set] = [process.argv[1], JSON.parse(process.argv[2])];
const [h, p, s] = tok.split('.');
const hdr = JSON.parse(Buffer.from(h, 'base64url'));
const jwk = set.keys.find(k => k.kid === hdr.kid);
const key = crypto.createPublicKey({ key: jwk, format: 'jwk' });
const ok = crypto.verify('sha256', Buffer.from(h + '.' + p), { key, dsaEncoding: 'ieee-p1363' }, Buffer.from(s, 'base64url'));
process.stdout.write(ok ? JSON.parse(Buffer.from(p, 'base64url')).aud : 'bad signature');
`
	for _, c := range []struct {
		name, token, want string
	}{
		{"a token verifies", tok, "sts.amazonaws.com"},
		{"a tampered token does not", tok[:strings.LastIndex(tok, ".")-2] + "x" + tok[strings.LastIndex(tok, ".")-1:], "bad signature"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, err := exec.Command(node, "-e", script, c.token, string(set)).CombinedOutput()
			if err != nil || string(out) != c.want {
				t.Fatalf("node: %q, %v; want %q", out, err, c.want)
			}
		})
	}
}

func TestNewRefusesPeriodsUnderAMinute(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for _, c := range []Config{{TokenTTL: time.Second}, {Rotation: time.Second}, {TokenTTL: -time.Minute}} {
		c.Store, c.Records, c.Vault, c.URL = f.db, f.db, f.vault, testURL
		if _, err := New(context.Background(), c); err == nil {
			t.Errorf("New took TTL %s and rotation %s", c.TokenTTL, c.Rotation)
		}
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	t.Run("more tokens than the limit are refused", func(t *testing.T) {
		many := make([]store.IdentityToken, MaxTokens+1)
		for n := range many {
			many[n] = store.IdentityToken{Name: fmt.Sprint("t", n), Audience: "a", TokenType: "JWT-SVID"}
		}
		if err := Validate(many); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "iam.tokens") {
			t.Fatalf("%d tokens: %v, want ErrInvalid naming iam.tokens", len(many), err)
		}
	})
	for _, c := range []struct {
		name  string
		token store.IdentityToken
		field string // "" when valid
	}{
		{"a JWT-SVID with an audience is valid", store.IdentityToken{Name: "aws", Audience: "sts.amazonaws.com", TokenType: "JWT-SVID"}, ""},
		{"an empty audience names the audience", store.IdentityToken{Name: "aws", Audience: " ", TokenType: "JWT-SVID"}, "iam.tokens.aws.audience"},
		{"an unknown type names the token type", store.IdentityToken{Name: "aws", Audience: "a", TokenType: "x509"}, "iam.tokens.aws.tokenType"},
		{"a brace in the name is refused", store.IdentityToken{Name: "a}b", Audience: "a", TokenType: "JWT-SVID"}, "iam.tokens: name"},
		{"an empty name is refused", store.IdentityToken{Audience: "a", TokenType: "JWT-SVID"}, "iam.tokens: name"},
		{"a name over its limit is refused", store.IdentityToken{Name: strings.Repeat("n", MaxNameBytes+1), Audience: "a", TokenType: "JWT-SVID"}, "iam.tokens: name"},
		{"an audience over its limit names the audience", store.IdentityToken{Name: "aws", Audience: strings.Repeat("a", MaxAudienceBytes+1), TokenType: "JWT-SVID"}, "iam.tokens.aws.audience"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := Validate([]store.IdentityToken{c.token})
			switch {
			case c.field == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.field != "" && (!errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.field)):
				t.Fatalf("error %v; want ErrInvalid naming %s", err, c.field)
			}
		})
	}
}
