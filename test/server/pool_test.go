package server

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/covetest"
	"github.com/cove-dev/cove/internal/sandbox/network/nettest"
	cove "github.com/cove-dev/cove/sdk"
)

// TestAClaimedSandboxCarriesNothingOfThePool runs a server keeping a warm pool of base with
// networking on, and shows a create served from it is the caller's own sandbox: its id is
// its hostname, its environment and access token are the caller's, its files and processes
// are the template's, and its network rules are the caller's; one that an earlier claimer
// marked leaves nothing to the next.
func TestAClaimedSandboxCarriesNothingOfThePool(t *testing.T) {
	in := nettest.New(t)
	s := covetest.StartWith(t, "", covetest.Options{OnStop: "kill", Args: []string{"--pool", "base=2", "--pool-refill-per-sec", "20"}})
	c := cove.NewClient(cove.Config{APIURL: s.URL, APIKey: s.Key})
	tok, err := os.ReadFile(filepath.Join(s.DataDir, "admin-token"))
	if err != nil {
		t.Fatal(err)
	}
	admin := cove.NewClient(cove.Config{APIURL: s.URL, AdminToken: strings.TrimSpace(string(tok))})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	waitReady := func(t *testing.T) {
		t.Helper()
		deadline := time.Now().Add(2 * time.Minute)
		for {
			ps, err := admin.Pools(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(ps) == 1 && ps[0].Template == "base" && ps[0].Ready == 2 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the pool did not fill: %+v", ps)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	run := func(t *testing.T, sb *cove.Sandbox, cmd string) string {
		t.Helper()
		res, err := sb.Commands.Run(ctx, cmd)
		if err != nil {
			t.Fatalf("%s: %v", cmd, err)
		}
		return strings.TrimSpace(res.Stdout)
	}
	claim := func(t *testing.T, opts cove.SandboxOptions) *cove.Sandbox {
		t.Helper()
		waitReady(t)
		sb, err := c.Create(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sb.Kill(context.Background()) })
		evs, err := c.Events(ctx, sb.ID, cove.EventOptions{})
		if err != nil || len(evs) == 0 {
			t.Fatalf("events of %s: %v %v", sb.ID, evs, err)
		}
		d, err := evs[0].Data()
		if created, ok := d.(*cove.CreatedEventData); err != nil || !ok || !created.Pooled || created.ClaimMS <= 0 {
			t.Fatalf("%s: created event %+v %v; want pooled with a claim time", sb.ID, d, err)
		}
		return sb
	}

	first := claim(t, cove.SandboxOptions{EnvVars: map[string]string{"OWNER": "first"}, NoInternet: true})
	t.Run("the claimed sandbox has its own id, environment and access token", func(t *testing.T) {
		if host := run(t, first, "hostname"); host != first.ID {
			t.Errorf("hostname %q, want its id %s", host, first.ID)
		}
		if env := run(t, first, "echo $OWNER"); env != "first" {
			t.Errorf("OWNER=%q", env)
		}
		if !first.Secure {
			t.Error("the sandbox is not secure") // envd's refusal without its token: internal/control/orchestrator's pool test
		}
	})
	t.Run("its network is the caller's: no internet", func(t *testing.T) {
		if out, code := curl(t, first, in.URL("http", "/from-pool")); code == 0 {
			t.Errorf("a sandbox created without internet reached the test host: %s", out)
		}
	})
	run(t, first, "echo mine > /tmp/mark; echo mine > /home/user/mark; (sleep 600 &) ; true")

	second := claim(t, cove.SandboxOptions{EnvVars: map[string]string{"OWNER": "second"}})
	t.Run("the next claim sees nothing of the first: files, env, processes", func(t *testing.T) {
		if second.ID == first.ID {
			t.Fatal("the same sandbox was claimed twice")
		}
		if out := run(t, second, "ls -A /tmp /home/user | grep -c mark || true"); out != "0" {
			t.Errorf("marks found: %s", out)
		}
		if env := run(t, second, "echo $OWNER"); env != "second" {
			t.Errorf("OWNER=%q", env)
		}
		if ps := run(t, second, "ps -eo comm= | grep -c sleep || true"); ps != "0" {
			t.Errorf("sleep processes: %s", ps)
		}
	})
	t.Run("its network is the caller's: the internet (the test host)", func(t *testing.T) {
		if out, code := curl(t, second, in.URL("http", "/from-pool")); code != 0 || !strings.Contains(out, "hello") {
			t.Errorf("curl exited %d: %s", code, out)
		}
	})
	t.Run("a create with volumes takes the cold path", func(t *testing.T) {
		vol, err := c.CreateVolume(ctx, "pooltest")
		if err != nil {
			t.Skipf("volumes: %v", err)
		}
		waitReady(t)
		sb, err := c.Create(ctx, cove.SandboxOptions{VolumeMounts: []cove.VolumeMount{{Name: vol.Name, Path: "/data"}}})
		if err != nil {
			t.Fatal(err)
		}
		defer sb.Kill(context.Background())
		evs, _ := c.Events(ctx, sb.ID, cove.EventOptions{})
		if len(evs) == 0 {
			t.Fatal("no events")
		}
		if d, _ := evs[0].Data(); d.(*cove.CreatedEventData).Pooled {
			t.Error("a create with volumes was served from the pool")
		}
	})
}
