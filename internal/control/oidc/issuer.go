// Package oidc is Cove's workload identity issuer (E2B's iam): an OpenID Connect issuer whose
// short-lived signed JWTs say "this request comes from sandbox S of template T of team X" to
// a cloud that trusts Cove's discovery document and key set.
//
// The one idea: a sandbox never holds a token. At create it registers named token specs
// (audience, type); its egress rules name them as ${e2b.identity.tokens.<name>}, and the
// egress proxy asks Token for a fresh one as it forwards each request. The signing keys are
// made on first start, rotated on a schedule, and kept in the store sealed with the vault's
// key; a retired key stays in the published key set until every token it signed has expired.
//
// It must not import the orchestrator, the network manager, egress or the edges: the egress proxy
// calls Token through its own interface, and the API serves what Discovery and JWKS return.
package oidc

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/cove-dev/cove/internal/control/vault"
	"github.com/cove-dev/cove/internal/errdefs"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/store"
)

// Defaults of Config.
const (
	DefaultTokenTTL = 15 * time.Minute
	DefaultRotation = 24 * time.Hour
)

// Paths of the documents relying parties fetch, under the issuer URL.
const (
	DiscoveryPath = "/.well-known/openid-configuration"
	JWKSPath      = "/.well-known/jwks.json"
)

// leeway is how long past its last token's expiry a retired key stays published: relying
// parties' clocks run a little off.
const leeway = time.Minute

// minPeriod is the shortest token TTL and key rotation New accepts.
const minPeriod = time.Minute

// Errors callers branch on.
var (
	// ErrNoToken is a token name the sandbox did not register, or a sandbox that is gone.
	ErrNoToken = errdefs.New(errdefs.ErrNotFound, "no such identity token")
	// ErrInvalid is a registration the issuer refuses (empty audience, unknown type).
	ErrInvalid = errdefs.New(errdefs.ErrInvalidArgument, "invalid identity token")
)

// Records reads sandbox records: whose a sandbox is, and whether it still lives.
type Records interface {
	GetSandbox(ctx context.Context, id string) (*store.Sandbox, error)
}

// Config is what New needs.
type Config struct {
	Store   store.Identity
	Records Records
	// Vault seals the private keys kept in Store.
	Vault *vault.Vault
	// URL is the issuer: the API's external URL (scheme and host, no path), the tokens' iss,
	// under which the discovery document and key set are served.
	URL string
	// TokenTTL is how long a token is valid; DefaultTokenTTL when 0.
	TokenTTL time.Duration
	// Rotation is how long a key signs before a new one takes over; DefaultRotation when 0.
	Rotation time.Duration
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// Issuer mints workload identity tokens and publishes the keys that verify them. Safe for
// concurrent use.
type Issuer struct {
	cfg         Config
	trustDomain string

	mu    sync.Mutex
	keys  []*signingKey // newest first: keys[0] signs
	cache map[cacheKey]cached
}

// signingKey is a store.SigningKey opened.
type signingKey struct {
	id      string
	priv    *ecdsa.PrivateKey
	created time.Time
	retired *time.Time
}

type cacheKey struct{ sandbox, name string }

type cached struct {
	token   string
	expires time.Time
}

// Issuer implements egress.IdentityTokens (internal/sandbox/egress).
var _ interface {
	Token(context.Context, string, string) (string, error)
} = (*Issuer)(nil)

// ParseURL checks an issuer URL: http or https, a host, no path, query or fragment (the
// documents are served at the root of the API). It returns it without a trailing slash.
func ParseURL(s string) (string, error) {
	u, err := url.Parse(strings.TrimSuffix(s, "/"))
	switch {
	case err != nil:
		return "", fmt.Errorf("issuer URL %q: %w", s, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return "", fmt.Errorf("issuer URL %q: the scheme must be https (or http)", s)
	case u.Host == "" || u.Hostname() == "":
		return "", fmt.Errorf("issuer URL %q: no host", s)
	case u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil:
		return "", fmt.Errorf("issuer URL %q: must be scheme://host[:port] alone: the API serves %s at its root", s, DiscoveryPath)
	}
	return u.Scheme + "://" + u.Host, nil
}

// New opens the issuer: it loads the keys from the store, making the first one (or a new one,
// when the newest is due for rotation).
func New(ctx context.Context, cfg Config) (*Issuer, error) {
	if cfg.Store == nil || cfg.Records == nil || cfg.Vault == nil {
		return nil, errors.New("oidc: a store, sandbox records and a vault are required")
	}
	iss, err := ParseURL(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("oidc: %w", err)
	}
	cfg.URL = iss
	if cfg.TokenTTL == 0 {
		cfg.TokenTTL = DefaultTokenTTL
	}
	if cfg.Rotation == 0 {
		cfg.Rotation = DefaultRotation
	}
	// Shorter would only churn keys and tokens; a mistyped unit should fail the start.
	if cfg.TokenTTL < minPeriod || cfg.Rotation < minPeriod {
		return nil, fmt.Errorf("oidc: token TTL %s and key rotation %s must each be at least %s", cfg.TokenTTL, cfg.Rotation, minPeriod)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	u, _ := url.Parse(iss)
	i := &Issuer{cfg: cfg, trustDomain: strings.ToLower(u.Hostname()), cache: map[cacheKey]cached{}}
	i.mu.Lock()
	defer i.mu.Unlock()
	if err := i.load(ctx); err != nil {
		return nil, err
	}
	if err := i.maintain(ctx); err != nil {
		return nil, err
	}
	return i, nil
}

// URL is the issuer URL, the tokens' iss.
func (i *Issuer) URL() string { return i.cfg.URL }

// load reads and unseals the stored keys. Called with mu held.
func (i *Issuer) load(ctx context.Context) error {
	stored, err := i.cfg.Store.SigningKeys(ctx)
	if err != nil {
		return fmt.Errorf("oidc: %w", err)
	}
	keys := make([]*signingKey, 0, len(stored))
	for _, k := range stored {
		if k.Algorithm != alg {
			return fmt.Errorf("oidc: key %s: algorithm %q, not %s", k.ID, k.Algorithm, alg)
		}
		der, err := i.cfg.Vault.Unseal(sealLabel(k.ID), k.Sealed)
		if err != nil {
			return fmt.Errorf("oidc: key %s: %w", k.ID, err)
		}
		parsed, err := x509.ParsePKCS8PrivateKey(der)
		priv, ok := parsed.(*ecdsa.PrivateKey)
		if err != nil || !ok {
			return fmt.Errorf("oidc: key %s: not an ECDSA key: %v", k.ID, err)
		}
		keys = append(keys, &signingKey{id: k.ID, priv: priv, created: k.CreatedAt, retired: k.RetiredAt})
	}
	i.keys = keys
	return nil
}

// maintain rotates the signing key when it is due and forgets the retired keys no token
// needs anymore. Called with mu held.
func (i *Issuer) maintain(ctx context.Context) error {
	now := i.cfg.Now()
	if len(i.keys) == 0 || i.keys[0].retired != nil || now.Sub(i.keys[0].created) >= i.cfg.Rotation {
		if err := i.rotate(ctx, now); err != nil {
			return err
		}
	}
	cutoff := now.Add(-i.cfg.TokenTTL - leeway)
	kept := i.keys[:0]
	dropped := false
	for _, k := range i.keys {
		if k.retired != nil && k.retired.Before(cutoff) {
			dropped = true
			continue
		}
		kept = append(kept, k)
	}
	i.keys = kept
	if dropped {
		if err := i.cfg.Store.DeleteSigningKeys(ctx, cutoff); err != nil {
			return fmt.Errorf("oidc: %w", err)
		}
	}
	return nil
}

// rotate makes a new signing key, seals it into the store and retires the one before it.
// Called with mu held.
func (i *Issuer) rotate(ctx context.Context, now time.Time) error {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("oidc: new key: %w", err)
	}
	kid, err := thumbprint(&priv.PublicKey)
	if err != nil {
		return fmt.Errorf("oidc: new key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return fmt.Errorf("oidc: new key: %w", err)
	}
	sealed, err := i.cfg.Vault.Seal(sealLabel(kid), der)
	if err != nil {
		return fmt.Errorf("oidc: new key: %w", err)
	}
	now = now.Round(time.Microsecond) // the store's precision
	if err := i.cfg.Store.InsertSigningKey(ctx, &store.SigningKey{ID: kid, Algorithm: alg, Sealed: sealed, CreatedAt: now}); err != nil {
		return fmt.Errorf("oidc: %w", err)
	}
	for _, k := range i.keys {
		if k.retired == nil {
			k.retired = &now
		}
	}
	i.keys = append([]*signingKey{{id: kid, priv: priv, created: now}}, i.keys...)
	telemetry.Logger(ctx).Info("identity signing key rotated", telemetry.KeyIdentityKid, kid)
	return nil
}

// Rotate makes a new signing key now; the old one stays published until its tokens expire.
func (i *Issuer) Rotate(ctx context.Context) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	if err := i.rotate(ctx, i.cfg.Now()); err != nil {
		return err
	}
	return i.maintain(ctx)
}

// thumbprint is pub's RFC 7638 JWK thumbprint, the key's kid.
func thumbprint(pub *ecdsa.PublicKey) (string, error) {
	j, err := jwkOf("", pub)
	if err != nil {
		return "", err
	}
	// The required members in lexicographic order, no whitespace.
	canon := `{"crv":"` + j.Crv + `","kty":"` + j.Kty + `","x":"` + j.X + `","y":"` + j.Y + `"}`
	sum := sha256.Sum256([]byte(canon))
	return b64.EncodeToString(sum[:]), nil
}

// Run keeps the keys rotated and forgets the registrations of killed sandboxes, until ctx
// ends.
func (i *Issuer) Run(ctx context.Context) {
	t := time.NewTicker(min(time.Minute, i.cfg.Rotation/4)) // Rotation/4 >= 15 s: New checked
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := i.Sweep(ctx); err != nil && ctx.Err() == nil {
			telemetry.Logger(ctx).Warn("identity sweep failed", telemetry.KeyError, err.Error())
		}
	}
}

// Sweep rotates the signing key when it is due, drops the keys no token needs, and forgets
// the token registrations of killed sandboxes.
func (i *Issuer) Sweep(ctx context.Context) error {
	i.mu.Lock()
	err := i.maintain(ctx)
	i.mu.Unlock()
	ids, derr := i.cfg.Store.DeleteKilledIdentityTokens(ctx)
	i.mu.Lock()
	for _, id := range ids {
		i.dropCached(id)
	}
	i.mu.Unlock()
	return errors.Join(err, derr)
}

// Limits of a registration: tokens are kept with the sandbox, and a name and audience go
// into every request that uses them.
const (
	MaxTokens        = 32
	MaxNameBytes     = 128
	MaxAudienceBytes = 1024
)

// Validate checks the tokens a create registers; the error names the field at fault.
func Validate(tokens []store.IdentityToken) error {
	if len(tokens) > MaxTokens {
		return fmt.Errorf("%w: iam.tokens has %d tokens, over the limit of %d", ErrInvalid, len(tokens), MaxTokens)
	}
	for _, t := range tokens {
		field := "iam.tokens." + t.Name
		if t.Name == "" || len(t.Name) > MaxNameBytes || strings.ContainsAny(t.Name, "{}") || strings.IndexFunc(t.Name, isControl) >= 0 {
			return fmt.Errorf("%w: iam.tokens: name %.40q must be 1 to %d bytes, without '{', '}' or control characters (it goes into ${e2b.identity.tokens.<name>})", ErrInvalid, t.Name, MaxNameBytes)
		}
		if strings.TrimSpace(t.Audience) == "" || len(t.Audience) > MaxAudienceBytes {
			return fmt.Errorf("%w: %s.audience must be 1 to %d bytes, not blank", ErrInvalid, field, MaxAudienceBytes)
		}
		if _, err := ParseTokenType(t.TokenType); err != nil {
			return fmt.Errorf("%w: %s.tokenType: %v", ErrInvalid, field, err)
		}
	}
	return nil
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) }

// Register keeps sandboxID's token specs (never tokens), replacing any it had.
func (i *Issuer) Register(ctx context.Context, sandboxID string, tokens []store.IdentityToken) error {
	if err := Validate(tokens); err != nil {
		return err
	}
	specs := make([]store.IdentityToken, len(tokens))
	for n, t := range tokens {
		t.SandboxID = sandboxID
		specs[n] = t
	}
	sort.Slice(specs, func(a, b int) bool { return specs[a].Name < specs[b].Name })
	if err := i.cfg.Store.PutIdentityTokens(ctx, sandboxID, specs); err != nil {
		return fmt.Errorf("register identity tokens: %w", err)
	}
	i.mu.Lock()
	i.dropCached(sandboxID)
	i.mu.Unlock()
	return nil
}

// Inherit gives sandbox to the tokens sandbox from registered: a fork keeps its source's
// network rules, and with them the token names they use. A source without tokens is not an
// error.
func (i *Issuer) Inherit(ctx context.Context, from, to string) error {
	tokens, err := i.cfg.Store.IdentityTokens(ctx, from)
	if err != nil || len(tokens) == 0 {
		return err
	}
	return i.Register(ctx, to, tokens)
}

// Forget drops sandboxID's registrations and cached tokens (at its kill).
func (i *Issuer) Forget(ctx context.Context, sandboxID string) error {
	i.mu.Lock()
	i.dropCached(sandboxID)
	i.mu.Unlock()
	return i.cfg.Store.DeleteIdentityTokens(ctx, sandboxID)
}

// dropCached forgets sandboxID's cached tokens. Called with mu held.
func (i *Issuer) dropCached(sandboxID string) {
	for k := range i.cache {
		if k.sandbox == sandboxID {
			delete(i.cache, k)
		}
	}
}

// Token returns a valid token named name for sandboxID: a cached one while more than a
// third of its life is left, else a newly signed one. ErrNoToken when the sandbox registered
// no such name or is gone.
func (i *Issuer) Token(ctx context.Context, sandboxID, name string) (string, error) {
	sb, err := i.cfg.Records.GetSandbox(ctx, sandboxID)
	if errors.Is(err, store.ErrNotFound) || (err == nil && sb.State == store.StateKilled) {
		return "", fmt.Errorf("%w: sandbox %s is gone", ErrNoToken, sandboxID)
	}
	if err != nil {
		return "", fmt.Errorf("identity token %q of %s: %w", name, sandboxID, err)
	}
	spec, err := i.cfg.Store.GetIdentityToken(ctx, sandboxID, name)
	if errors.Is(err, store.ErrNotFound) {
		return "", fmt.Errorf("%w: sandbox %s registered no token %q (iam.tokens at create)", ErrNoToken, sandboxID, name)
	}
	if err != nil {
		return "", fmt.Errorf("identity token %q of %s: %w", name, sandboxID, err)
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	now := i.cfg.Now()
	ck := cacheKey{sandboxID, name}
	if c, ok := i.cache[ck]; ok && c.expires.Sub(now) > i.cfg.TokenTTL/3 {
		return c.token, nil
	}
	if err := i.maintain(ctx); err != nil {
		return "", err
	}
	key := i.keys[0]
	claims := Claims{
		Issuer: i.cfg.URL, Subject: i.Subject(sb), Audience: spec.Audience,
		IssuedAt: now.Unix(), NotBefore: now.Unix(), Expiry: now.Add(i.cfg.TokenTTL).Unix(), ID: newJTI(),
	}
	tok, err := sign(key.priv, key.id, claims)
	if err != nil {
		return "", fmt.Errorf("identity token %q of %s: %w", name, sandboxID, err)
	}
	i.cache[ck] = cached{token: tok, expires: time.Unix(claims.Expiry, 0)}
	return tok, nil
}

// Subject is the SPIFFE ID a token of sb names: spiffe://<issuer host>/team/<team>/
// template/<template>/sandbox/<id>. A character a SPIFFE path may not hold becomes '_'.
func (i *Issuer) Subject(sb *store.Sandbox) string {
	return "spiffe://" + i.trustDomain + "/team/" + segment(sb.TeamID) + "/template/" + segment(sb.TemplateID) + "/sandbox/" + segment(sb.ID)
}

func segment(s string) string {
	if s == "" || s == "." || s == ".." {
		return "_"
	}
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, s)
}

func newJTI() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Discovery is the issuer's OpenID Provider metadata (OpenID Connect Discovery 1.0 §3), in
// the shape workload issuers publish it.
type Discovery struct {
	Issuer          string   `json:"issuer"`
	JWKSURI         string   `json:"jwks_uri"`
	ResponseTypes   []string `json:"response_types_supported"`
	SubjectTypes    []string `json:"subject_types_supported"`
	SigningAlgs     []string `json:"id_token_signing_alg_values_supported"`
	ClaimsSupported []string `json:"claims_supported"`
}

// Discovery returns the discovery document.
func (i *Issuer) Discovery() Discovery {
	return Discovery{
		Issuer: i.cfg.URL, JWKSURI: i.cfg.URL + JWKSPath,
		ResponseTypes: []string{"id_token"}, SubjectTypes: []string{"public"}, SigningAlgs: []string{alg},
		ClaimsSupported: []string{"iss", "sub", "aud", "iat", "nbf", "exp", "jti"},
	}
}

// JWKS returns the published keys: the signing one and the retired ones whose tokens may
// still be valid.
func (i *Issuer) JWKS(ctx context.Context) (JWKS, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if err := i.maintain(ctx); err != nil {
		return JWKS{}, err
	}
	set := JWKS{Keys: make([]JWK, 0, len(i.keys))}
	for _, k := range i.keys {
		j, err := jwkOf(k.id, &k.priv.PublicKey)
		if err != nil {
			return JWKS{}, err
		}
		set.Keys = append(set.Keys, j)
	}
	return set, nil
}

// sealLabel is the associated data a key's private half is sealed under: its kid, in a
// namespace of its own among the vault's sealed values.
func sealLabel(kid string) string { return "oidc-key:" + kid }
