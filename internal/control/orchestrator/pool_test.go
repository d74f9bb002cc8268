package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/builder/template"
	"github.com/cove-dev/cove/internal/observe/events"
	"github.com/cove-dev/cove/internal/sandbox/egress"
	"github.com/cove-dev/cove/internal/store"
)

func withPool(template string, n int) option {
	return func(c *Config) {
		c.Pools = map[string]int{template: n}
		withPoolStore(c)
	}
}

// withPoolStore keeps pool sizes in the harness's store and refills at once.
func withPoolStore(c *Config) {
	c.PoolSizes = c.Store.(store.PoolSizes)
	c.PoolRefillPerSec = 1000
}

// waitPool waits until template's pool holds n ready sandboxes and returns their ids.
func (h *harness) waitPool(name string, n int) []string {
	h.t.Helper()
	h.waitFor("the pool of "+name+" holds its sandboxes", func() bool {
		for _, s := range h.o.Pools("") {
			if s.Template == name {
				return s.Ready == n
			}
		}
		return false
	})
	h.o.poolMu.Lock()
	defer h.o.poolMu.Unlock()
	var ids []string
	for _, pe := range h.o.pools[name].ready {
		ids = append(ids, pe.e.sb.ID)
	}
	return ids
}

// envs reads the environment envd gives the sandbox's commands, with its access token.
func (h *harness) envs(id, token string) map[string]string {
	h.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://envd/envs", nil)
	if token != "" {
		req.Header.Set("X-Access-Token", token)
	}
	res, err := h.o.envdClient(id).Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer res.Body.Close()
	var env map[string]string
	if res.StatusCode != http.StatusOK || json.NewDecoder(res.Body).Decode(&env) != nil {
		h.t.Fatalf("envs of %s: %d", id, res.StatusCode)
	}
	return env
}

func TestAWarmPoolServesCreatesWithTheCallersIdentity(t *testing.T) {
	net := newFakeNetwork(t.TempDir())
	h := newHarness(t, withNetwork(net), withPool("base", 2))
	ctx := context.Background()
	time.Sleep(50 * time.Millisecond)
	var made int
	h.rt.set(func(f *fakeRuntime) { made = len(f.made) })
	if made != 0 {
		t.Fatalf("%d sandboxes booted before Recover swept the leftovers", made)
	}
	if err := h.o.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	pooled := h.waitPool("base", 2)
	for _, id := range pooled {
		if p, ok := net.Policy(id); !ok || !p.AllowInternet || p.Team != "" || len(p.AllowOut)+len(p.DenyOut) != 0 {
			t.Errorf("pooled %s: policy %+v; want attached under a default create's rules, no team", id, p)
		}
		if _, err := h.db.GetSandbox(ctx, id); err == nil {
			t.Errorf("pooled %s has a record before any claim", id)
		}
	}

	allow := netip.MustParsePrefix("198.18.0.0/15")
	sb := h.create(CreateRequest{Secure: true, AllowInternet: true, Network: &egress.Policy{AllowOut: []netip.Prefix{allow}},
		EnvVars: map[string]string{"CALLER": "mine"}, Metadata: map[string]string{"k": "v"}, PrivateTraffic: true})
	t.Run("the create claims a pooled sandbox, as the caller's", func(t *testing.T) {
		if !slices.Contains(pooled, sb.ID) {
			t.Fatalf("created %s, not one of the pool's %v", sb.ID, pooled)
		}
		rec := h.record(sb.ID)
		if rec.TeamID != h.team || rec.Metadata["k"] != "v" || !rec.Secure || rec.EnvdAccessToken == "" {
			t.Errorf("record %+v", rec)
		}
		p, _ := net.Policy(sb.ID)
		if p.Team != h.team || !p.AllowInternet || !slices.Contains(p.AllowOut, allow) {
			t.Errorf("network policy after the claim %+v", p)
		}
		if in, ok := net.Inbound(sb.ID); !ok || in.TrafficToken == "" {
			t.Errorf("inbound after the claim %+v %v: want the traffic token", in, ok)
		}
	})
	t.Run("envd has the caller's environment and access token", func(t *testing.T) {
		if env := h.envs(sb.ID, h.record(sb.ID).EnvdAccessToken); env["CALLER"] != "mine" {
			t.Errorf("envs %v", env)
		}
		req, _ := http.NewRequest(http.MethodGet, "http://envd/envs", nil)
		res, err := h.o.envdClient(sb.ID).Do(req)
		if err != nil || res.StatusCode != http.StatusUnauthorized {
			t.Errorf("envs without the token: %v %v", res, err)
		}
		if res != nil {
			res.Body.Close()
		}
	})
	t.Run("its create is one event, pooled, with the claim time", func(t *testing.T) {
		_, data := h.event(sb.ID, events.SandboxCreated)
		if data["pooled"] != true || data["claim_ms"] == nil {
			t.Errorf("created event data %v", data)
		}
		if n := len(h.events(sb.ID)); n != 1 {
			t.Errorf("%d events, want the one created", n)
		}
	})
	t.Run("the pool refills", func(t *testing.T) {
		again := h.waitPool("base", 2)
		if slices.Contains(again, sb.ID) {
			t.Errorf("the claimed sandbox is still pooled: %v", again)
		}
	})
	t.Run("a template without a pool takes the cold path", func(t *testing.T) {
		h.addTemplate("other", "root:x:0:0:root:/root:/bin/sh\n")
		cold := h.create(CreateRequest{TemplateID: "other"})
		if slices.Contains(h.waitPool("base", 2), cold.ID) || cold.TemplateID != "other" {
			t.Errorf("cold create %+v", cold)
		}
	})
	t.Run("a rebuilt template's pooled sandboxes are not claimed, and are replaced", func(t *testing.T) {
		before := h.waitPool("base", 2)
		rebuildTemplate(t, h, "base")
		fresh := h.create(CreateRequest{})
		if slices.Contains(before, fresh.ID) {
			t.Errorf("claimed %s, started from the template's earlier build", fresh.ID)
		}
		h.waitFor("the stale pooled sandboxes are destroyed", func() bool {
			for _, id := range before {
				if !h.rt.wasDestroyed(id) {
					return false
				}
			}
			return true
		})
		h.waitPool("base", 2)
	})
	t.Run("a stopping server destroys the pool and records nothing of it", func(t *testing.T) {
		left := h.waitPool("base", 2)
		h.o.Shutdown(ctx)
		for _, id := range left {
			if !h.rt.wasDestroyed(id) || net.wasDetached(id) == false {
				t.Errorf("pooled %s left behind at shutdown", id)
			}
			if _, err := h.db.GetSandbox(ctx, id); err == nil {
				t.Errorf("pooled %s got a record", id)
			}
		}
	})
}

// rebuildTemplate makes name look rebuilt: a new creation time in its meta.
func rebuildTemplate(t *testing.T, h *harness, name string) {
	t.Helper()
	path := filepath.Join(h.templates.Dir(), name, "meta.json")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m template.Template
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	m.CreatedAt = time.Now().Add(time.Second)
	b, _ = json.Marshal(m)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestARestartedServerRebuildsItsPoolInsteadOfAdoptingIt(t *testing.T) {
	h := newHarness(t, withPool("base", 1), withCheckpoints)
	if err := h.o.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	old := h.waitPool("base", 1)
	h.restart()
	if !h.rt.wasDestroyed(old[0]) {
		t.Errorf("the pooled %s outlived its server", old[0])
	}
	now := h.waitPool("base", 1)
	if now[0] == old[0] {
		t.Errorf("the new server pooled the old server's sandbox %s", old[0])
	}
}

func TestPoolSizes(t *testing.T) {
	h := newHarness(t, withPoolStore)
	if err := h.o.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx := h.ctx("req-pool")
	for _, tt := range []struct {
		name, owner, template string
		n                     int
		want                  error
	}{
		{"a negative size is invalid", "", "base", -1, ErrInvalid},
		{"a size past the cap is invalid", "", "base", DefaultPoolMax + 1, ErrInvalid},
		{"a team cannot size the operator's template", h.team, "base", 1, ErrTemplateNotFound},
		{"nor a template that is not there", "", "nope", 1, ErrTemplateNotFound},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := h.o.SetPoolSize(ctx, tt.owner, tt.template, tt.n); !errors.Is(err, tt.want) {
				t.Errorf("SetPoolSize: %v, want %v", err, tt.want)
			}
		})
	}
	t.Run("the operator sizes a pool; the size is recorded and the pool fills", func(t *testing.T) {
		if err := h.o.SetPoolSize(ctx, "", "base", 1); err != nil {
			t.Fatal(err)
		}
		if sizes, err := h.db.PoolSizes(context.Background()); err != nil || sizes["base"] != 1 {
			t.Fatalf("recorded sizes %v %v", sizes, err)
		}
		h.waitPool("base", 1)
	})
	t.Run("a restarted server keeps the recorded size", func(t *testing.T) {
		h.restart()
		h.waitPool("base", 1)
	})
	t.Run("a smaller size destroys what is over it", func(t *testing.T) {
		id := h.waitPool("base", 1)[0]
		if err := h.o.SetPoolSize(ctx, "", "base", 0); err != nil {
			t.Fatal(err)
		}
		if !h.rt.wasDestroyed(id) {
			t.Errorf("pooled %s kept past the size", id)
		}
	})
	t.Run("a template whose start command runs at create cannot be pooled", func(t *testing.T) {
		h.addTemplate("starts", "root:x:0:0:root:/root:/bin/sh\n")
		path := filepath.Join(h.templates.Dir(), "starts", "meta.json")
		b, _ := json.Marshal(template.Template{Name: "starts", CreatedAt: time.Now(), StartCmd: "sleep infinity"})
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := h.o.SetPoolSize(ctx, "", "starts", 1); !errors.Is(err, ErrInvalid) {
			t.Errorf("SetPoolSize: %v, want invalid", err)
		}
	})
}

func TestATeamSizesThePoolsOfItsOwnTemplatesWithinItsQuota(t *testing.T) {
	h := newHarness(t, withPoolStore, func(c *Config) { c.Quotas = Quotas{Default: Quota{Sandboxes: 3}} })
	for _, name := range []string{"mine", "also-mine"} {
		h.addTemplate(name, "root:x:0:0:root:/root:/bin/sh\n")
		b, _ := json.Marshal(template.Template{Name: name, CreatedAt: time.Now(), TeamID: h.team})
		if err := os.WriteFile(filepath.Join(h.templates.Dir(), name, "meta.json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx := h.ctx("req-pool")
	if err := h.o.SetPoolSize(ctx, h.team, "mine", 2); err != nil {
		t.Fatalf("the team's own template: %v", err)
	}
	if err := h.o.SetPoolSize(ctx, h.team, "also-mine", 2); !errors.Is(err, ErrInvalid) {
		t.Errorf("pools past the team's 3 sandboxes: %v, want invalid", err)
	}
	if err := h.o.SetPoolSize(ctx, h.team, "also-mine", 1); err != nil {
		t.Errorf("pools within the team's 3 sandboxes: %v", err)
	}
	if err := h.o.SetPoolSize(ctx, "another-team", "mine", 1); !errors.Is(err, ErrTemplateNotFound) {
		t.Errorf("another team sizing the team's template: %v, want not found", err)
	}
	if got := h.o.Pools("another-team"); len(got) != 0 {
		t.Errorf("another team sees the team's pools: %+v", got)
	}
	if got := h.o.Pools(h.team); len(got) != 2 {
		t.Errorf("the team sees %+v, want its two pools", got)
	}
}
