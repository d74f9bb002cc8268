package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/control/api"
	"github.com/cove-dev/cove/internal/control/oidc"
	"github.com/cove-dev/cove/internal/control/orchestrator"
	"github.com/cove-dev/cove/internal/control/snapshot"
	"github.com/cove-dev/cove/internal/control/vault"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/store/sqlite"
	cove "github.com/cove-dev/cove/sdk"
)

const issuerURL = "https://cove.example.test"

// newIdentityEnv is newEnv with a real issuer over a real SQLite store and vault.
func newIdentityEnv(t *testing.T) (*identityEnv, *sqlite.DB) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	db, err := sqlite.Open(ctx, filepath.Join(dir, "cove.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	v, err := vault.Open(filepath.Join(dir, "vault"))
	if err != nil {
		t.Fatal(err)
	}
	issuer, err := oidc.New(ctx, oidc.Config{Store: db, Records: db, Vault: v, URL: issuerURL})
	if err != nil {
		t.Fatal(err)
	}
	e := &identityEnv{env: &env{fake: newFake(), logs: &logBuffer{}}, identity: issuer}
	srv := httptest.NewServer(api.New(api.Config{Sandboxes: e.fake, Keys: fakeKeys{}, Identity: issuer, Logger: slog.New(slog.NewJSONHandler(e.logs, nil))}))
	t.Cleanup(srv.Close)
	e.url = srv.URL
	return e, db
}

// identityEnv is an env whose API has a real issuer.
type identityEnv struct {
	*env
	identity *oidc.Issuer
}

func TestIdentityDocumentsAreServedWithoutAKey(t *testing.T) {
	t.Parallel()
	e, _ := newIdentityEnv(t)
	get := func(path string) (int, map[string]any) {
		t.Helper()
		res, err := http.Get(e.url + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var m map[string]any
		if err := json.NewDecoder(res.Body).Decode(&m); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		return res.StatusCode, m
	}
	status, doc := get("/.well-known/openid-configuration")
	if status != http.StatusOK || doc["issuer"] != issuerURL || doc["jwks_uri"] != issuerURL+"/.well-known/jwks.json" {
		t.Fatalf("discovery %d %v; want issuer %s and its jwks_uri", status, doc, issuerURL)
	}
	if algs, _ := doc["id_token_signing_alg_values_supported"].([]any); len(algs) != 1 || algs[0] != "ES256" {
		t.Fatalf("signing algorithms %v, want [ES256]", doc["id_token_signing_alg_values_supported"])
	}
	status, set := get(strings.TrimPrefix(doc["jwks_uri"].(string), issuerURL))
	keys, _ := set["keys"].([]any)
	if status != http.StatusOK || len(keys) != 1 {
		t.Fatalf("key set %d %v, want one key", status, set)
	}
	k := keys[0].(map[string]any)
	if k["kty"] != "EC" || k["crv"] != "P-256" || k["alg"] != "ES256" || k["kid"] == "" || k["d"] != nil {
		t.Fatalf("key %v: want a public P-256 key with a kid", k)
	}
}

func TestCreateRegistersIdentityTokens(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// The body E2B's SDK 2.51 sends for iam: { tokens: { aws: Secret.iamToken({ audience, tokenType }) } }.
	const good = `{"templateID":"base","iam":{"tokens":{"aws":{"audience":"sts.amazonaws.com","tokenType":"JWT-SVID"}}}}`

	t.Run("a create with iam registers the named token with the new sandbox, and kill forgets it", func(t *testing.T) {
		t.Parallel()
		e, db := newIdentityEnv(t)
		res := e.do(t, http.MethodPost, "/v2/sandboxes", good)
		if res.status != http.StatusCreated {
			t.Fatalf("create: %d %s", res.status, res.body)
		}
		id := res.json(t)["sandboxID"].(string)
		tok, err := db.GetIdentityToken(ctx, id, "aws")
		if err != nil || tok.Audience != "sts.amazonaws.com" || tok.TokenType != "JWT-SVID" {
			t.Fatalf("registered %+v, %v", tok, err)
		}
		if res := e.do(t, http.MethodDelete, "/sandboxes/"+id, ""); res.status != http.StatusNoContent {
			t.Fatalf("kill: %d %s", res.status, res.body)
		}
		if _, err := db.GetIdentityToken(ctx, id, "aws"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("after kill: %v, want the registration gone", err)
		}
	})

	for _, c := range []struct{ name, body, field string }{
		{"an unknown token type is a 400 naming the field", `{"templateID":"base","iam":{"tokens":{"aws":{"audience":"a","tokenType":"x509"}}}}`, "iam.tokens.aws.tokenType"},
		{"an empty audience is a 400 naming the field", `{"templateID":"base","iam":{"tokens":{"aws":{"audience":"","tokenType":"JWT-SVID"}}}}`, "iam.tokens.aws.audience"},
		{"a brace in a token name is a 400", `{"templateID":"base","iam":{"tokens":{"a}b":{"audience":"a","tokenType":"JWT-SVID"}}}}`, "iam.tokens: name"},
	} {
		t.Run(c.name+" and makes no sandbox", func(t *testing.T) {
			t.Parallel()
			e, _ := newIdentityEnv(t)
			res := e.do(t, http.MethodPost, "/v2/sandboxes", c.body)
			if res.status != http.StatusBadRequest || !strings.Contains(string(res.body), c.field) {
				t.Fatalf("%d %s; want a 400 naming %s", res.status, res.body, c.field)
			}
			e.fake.mu.Lock()
			defer e.fake.mu.Unlock()
			if n := len(e.fake.created); n != 0 {
				t.Fatalf("%d creates reached the orchestrator", n)
			}
		})
	}

	t.Run("the Go SDK's IAM option registers the token", func(t *testing.T) {
		t.Parallel()
		e, db := newIdentityEnv(t)
		c := cove.NewClient(cove.Config{APIURL: e.url, APIKey: testKey})
		sb, err := c.Create(ctx, cove.SandboxOptions{IAM: &cove.IAM{Tokens: map[string]cove.IAMToken{
			"gcp": {Audience: "//iam.googleapis.com/projects/1/pools/p/providers/cove", TokenType: cove.TokenTypeJWTSVID},
		}}})
		if err != nil {
			t.Fatal(err)
		}
		if tok, err := db.GetIdentityToken(ctx, sb.ID, "gcp"); err != nil || tok.TokenType != "JWT-SVID" {
			t.Fatalf("registered %+v, %v", tok, err)
		}
	})

	t.Run("a server without an issuer refuses iam", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, "")
		if res := e.do(t, http.MethodPost, "/v2/sandboxes", good); res.status != http.StatusBadRequest || !strings.Contains(string(res.body), "iam") {
			t.Fatalf("%d %s; want a 400 naming iam", res.status, res.body)
		}
	})
}

// forkingFake is the fake orchestrator that also forks: each fork is a new sandbox.
type forkingFake struct{ *fakeSandboxes }

func (f forkingFake) Fork(ctx context.Context, teamID, id string, count int, _ time.Duration) ([]orchestrator.ForkResult, error) {
	out := make([]orchestrator.ForkResult, count)
	for i := range out {
		out[i].Sandbox, out[i].Err = f.Create(ctx, orchestrator.CreateRequest{TeamID: teamID, TemplateID: "base"})
	}
	return out, nil
}

func (forkingFake) CreateSnapshot(context.Context, string, string, string) (*snapshot.Snapshot, error) {
	return nil, errors.New("not in this test")
}

func (forkingFake) ListSnapshots(context.Context, string, string, string) ([]*snapshot.Snapshot, error) {
	return nil, nil
}

func (forkingFake) DeleteSnapshot(context.Context, string, string) error { return nil }

func (forkingFake) DiskUsage(context.Context) ([]cove.DiskUsage, error) { return nil, nil }

func TestAForkInheritsItsSourcesIdentityTokens(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, db := newIdentityEnv(t)
	srv := httptest.NewServer(api.New(api.Config{Sandboxes: e.fake, Durable: forkingFake{e.fake}, Keys: fakeKeys{}, Identity: e.identity}))
	t.Cleanup(srv.Close)
	e.url = srv.URL
	tokens := []store.IdentityToken{{Name: "aws", Audience: "sts.amazonaws.com", TokenType: "JWT-SVID"}}
	if err := e.identity.Register(ctx, "irunning", tokens); err != nil {
		t.Fatal(err)
	}
	res := e.do(t, http.MethodPost, "/sandboxes/irunning/fork", `{"count":2}`)
	var forks []struct {
		Sandbox struct {
			SandboxID string `json:"sandboxID"`
		} `json:"sandbox"`
	}
	if err := json.Unmarshal(res.body, &forks); err != nil || res.status != http.StatusCreated || len(forks) != 2 {
		t.Fatalf("fork: %d %s", res.status, res.body)
	}
	for _, f := range forks {
		if tok, err := db.GetIdentityToken(ctx, f.Sandbox.SandboxID, "aws"); err != nil || tok.Audience != "sts.amazonaws.com" {
			t.Errorf("fork %s: %+v, %v; want the source's token", f.Sandbox.SandboxID, tok, err)
		}
	}
}
