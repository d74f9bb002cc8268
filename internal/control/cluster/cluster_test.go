package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/control/api/adminroutes"
	"github.com/cove-dev/cove/internal/control/cluster"
	"github.com/cove-dev/cove/internal/httpx"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/store/postgres"
	"github.com/cove-dev/cove/internal/store/postgres/pgtest"
	cove "github.com/cove-dev/cove/sdk"
)

func TestMain(m *testing.M) {
	code := m.Run()
	pgtest.StopShared()
	os.Exit(code)
}

// handles opens n handles on one new database, one per simulated node: each has its own pool,
// as separate cove server processes would.
func handles(t *testing.T, n int) []*postgres.DB {
	t.Helper()
	dsn := pgtest.Shared(t).NewDatabase(t)
	var out []*postgres.DB
	for range n {
		db, err := postgres.Open(context.Background(), dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		out = append(out, db)
	}
	return out
}

func node(name string, sandboxes int) *store.Node {
	return &store.Node{Name: name, AdvertiseURL: "http://198.18.0.1:3000", VCPUs: 64, MemoryMB: 64 << 10, DiskMB: 1 << 20,
		MaxSandboxes: sandboxes, MaxStarts: 100, Version: "test"}
}

// TestRacingCreatesNeverOvercommit: 60 creates race from three nodes' handles onto three
// nodes of four sandboxes each: exactly twelve are placed, no node holds more than four, and
// a team limit of five across the cluster admits exactly five of the team's.
func TestRacingCreatesNeverOvercommit(t *testing.T) {
	ctx := context.Background()
	dbs := handles(t, 3)
	for i, db := range dbs {
		if err := db.RegisterNode(ctx, node(fmt.Sprintf("node-%c", 'a'+i), 4), time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	var placed, full, quota atomic.Int64
	var wg sync.WaitGroup
	for i := range 60 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			team, limits := "team_free", store.TeamLimits{}
			if i%2 == 0 {
				team, limits = "team_capped", store.TeamLimits{Sandboxes: 5}
			}
			_, err := cluster.Place(ctx, dbs[i%3], cluster.Request{SandboxID: fmt.Sprintf("sb%02d", i), TeamID: team, VCPUs: 1, MemoryMB: 512, Limits: limits},
				rand.New(rand.NewPCG(uint64(i), 1)))
			switch {
			case err == nil:
				placed.Add(1)
			case errors.Is(err, store.ErrTeamQuota):
				quota.Add(1)
			case errors.Is(err, store.ErrNodeFull):
				full.Add(1)
			default:
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if placed.Load() != 12 {
		t.Fatalf("placed %d, full %d, over quota %d; want 12 placed", placed.Load(), full.Load(), quota.Load())
	}
	nodes, err := dbs[0].ListNodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	capped := 0
	for _, n := range nodes {
		held, _ := dbs[0].PlacementsOn(ctx, n.Name)
		if n.UsedSandboxes != 4 || len(held) != 4 || n.Starting != 4 || n.UsedVCPUs != 4 {
			t.Errorf("%s: used %d, %d placements, %d starting", n.Name, n.UsedSandboxes, len(held), n.Starting)
		}
		for _, r := range held {
			if r.TeamID == "team_capped" {
				capped++
			}
		}
	}
	if capped > 5 {
		t.Errorf("the capped team holds %d sandboxes, over its 5", capped)
	}
	t.Run("a release gives the room back, and a start done frees a start", func(t *testing.T) {
		held, err := dbs[1].PlacementsOn(ctx, "node-b")
		if err != nil || len(held) == 0 {
			t.Fatal(held, err)
		}
		r, err := dbs[1].PlacementOf(ctx, held[0].SandboxID)
		if err != nil || r.Node != "node-b" {
			t.Fatal(r, err)
		}
		if err := dbs[1].StartDone(ctx, r.SandboxID); err != nil {
			t.Fatal(err)
		}
		if err := dbs[2].Release(ctx, r.SandboxID); err != nil {
			t.Fatal(err)
		}
		n, _ := dbs[0].GetNode(ctx, r.Node)
		if n.UsedSandboxes != 3 || n.Starting != 3 {
			t.Fatalf("after the release: %d used, %d starting", n.UsedSandboxes, n.Starting)
		}
		got, err := cluster.Place(ctx, dbs[0], cluster.Request{SandboxID: "sb_again", TeamID: "team_free", VCPUs: 1, MemoryMB: 512}, nil)
		if err != nil || got != r.Node {
			t.Fatalf("placed on %q, %v; want %s, the only room", got, err, r.Node)
		}
	})
}

// TestPlacementPrefersRoomAndTheTemplateCache: of nodes alike, one caching the template wins;
// a draining node takes nothing.
func TestPlacementPrefersRoomAndTheTemplateCache(t *testing.T) {
	ctx := context.Background()
	db := handles(t, 1)[0]
	for _, n := range []*store.Node{node("a", 10), node("b", 10), node("c", 10)} {
		if n.Name == "b" {
			n.Templates = []string{"python"}
		}
		if err := db.RegisterNode(ctx, n, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.SetNodeState(ctx, "c", store.NodeDraining); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		got, err := cluster.Place(ctx, db, cluster.Request{SandboxID: fmt.Sprintf("p%d", i), TeamID: "t", Template: "python", VCPUs: 1, MemoryMB: 256},
			rand.New(rand.NewPCG(uint64(i), 2)))
		if err != nil || got != "b" {
			t.Fatalf("create %d placed on %q, %v; want b, which caches python", i, got, err)
		}
		if err := db.StartDone(ctx, fmt.Sprintf("p%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if held, _ := db.PlacementsOn(ctx, "c"); len(held) != 0 {
		t.Fatal("a draining node was given a sandbox")
	}
	t.Run("a move follows the room", func(t *testing.T) {
		if err := db.MovePlacement(ctx, "p0", "a"); err != nil {
			t.Fatal(err)
		}
		if err := db.MovePlacement(ctx, "p1", "c"); !errors.Is(err, store.ErrNodeFull) {
			t.Fatalf("a move to a draining node: %v", err)
		}
		a, _ := db.GetNode(ctx, "a")
		b, _ := db.GetNode(ctx, "b")
		if a.UsedSandboxes != 1 || b.UsedSandboxes != 4 {
			t.Fatalf("after the move: a %d, b %d", a.UsedSandboxes, b.UsedSandboxes)
		}
	})
}

// TestALapsedLeaseIsLostOnce: a node that stops renewing is marked lost by the first sweep
// after its lease, once; its sandboxes go to OnNodeLost and their room is given back; when it
// comes back, its next renewal tells it it was lost, it kills what it runs, and it joins
// again with nothing resurrected.
func TestALapsedLeaseIsLostOnce(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dbs := handles(t, 2)
	dead := &cluster.Member{Store: dbs[0], Node: *node("b", 10), Interval: 50 * time.Millisecond, LeaseFor: 200 * time.Millisecond}
	if err := dead.Register(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := dbs[0].Reserve(ctx, store.Reservation{SandboxID: fmt.Sprintf("b%d", i), Node: "b", TeamID: "t", VCPUs: 1, MemoryMB: 256}, store.TeamLimits{}); err != nil {
			t.Fatal(err)
		}
	}
	// Node b renews for a while, then dies (its renewals stop).
	memberCtx, kill := context.WithCancel(ctx)
	go dead.Run(memberCtx)
	time.Sleep(300 * time.Millisecond)
	sweeper := &cluster.Sweeper{Store: dbs[1]}
	if lost, err := sweeper.Sweep(ctx); err != nil || len(lost) != 0 {
		t.Fatalf("a renewing node was declared lost: %v %v", lost, err)
	}
	kill()
	var ended []string
	sweeper.OnNodeLost = func(_ context.Context, n *store.Node, held []*store.Reservation) {
		for _, r := range held {
			ended = append(ended, n.Name+"/"+r.SandboxID)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(ended) == 0 && time.Now().Before(deadline) {
		if _, err := sweeper.Sweep(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(ended) != 3 {
		t.Fatalf("sandboxes ended for the lost node: %v", ended)
	}
	if lost, _ := sweeper.Sweep(ctx); len(lost) != 0 {
		t.Fatal("a lost node was declared lost twice")
	}
	n, _ := dbs[1].GetNode(ctx, "b")
	if n.State != store.NodeLost || n.LostAt == nil || n.UsedSandboxes != 0 {
		t.Fatalf("the lost node: %+v", n)
	}
	if err := dbs[1].Reserve(ctx, store.Reservation{SandboxID: "x", Node: "b", TeamID: "t", VCPUs: 1}, store.TeamLimits{}); !errors.Is(err, store.ErrNodeFull) {
		t.Fatalf("a create was placed on a lost node: %v", err)
	}
	// Node b comes back: its renewal says it was lost; it kills its sandboxes, then rejoins.
	lostSeen := make(chan time.Time, 1)
	back := &cluster.Member{Store: dbs[0], Node: dead.Node, Interval: dead.Interval, LeaseFor: dead.LeaseFor,
		OnLost: func(_ context.Context, at time.Time) { lostSeen <- at }}
	go back.Run(ctx)
	select {
	case at := <-lostSeen:
		if !at.Equal(*n.LostAt) {
			t.Errorf("told lost at %v, the cluster says %v", at, n.LostAt)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the returning node was not told it was lost")
	}
	deadline = time.Now().Add(5 * time.Second)
	for {
		n, _ = dbs[1].GetNode(ctx, "b")
		if n.State == store.NodeActive || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n.State != store.NodeActive || n.UsedSandboxes != 0 {
		t.Fatalf("the node after it rejoined: %s with %d sandboxes", n.State, n.UsedSandboxes)
	}
}

// TestNodeRoutes: GET /admin/nodes lists the nodes as the SDK reads them; drain stops
// placement on a node and activate undoes it; a lost node cannot be drained; an unknown one
// is a 404 naming it.
func TestNodeRoutes(t *testing.T) {
	ctx := context.Background()
	db := handles(t, 1)[0]
	for _, n := range []*store.Node{node("a", 4), node("b", 4)} {
		if err := db.RegisterNode(ctx, n, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.RegisterNode(ctx, node("gone", 4), -time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := (&cluster.Sweeper{Store: db}).Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	// The routes as the API serves them, the admin token taken as shown.
	admin := httpx.Chain{Edge: "api", Authenticate: func(r *http.Request, _ httpx.Auth) (context.Context, error) { return r.Context(), nil }}
	srv := httptest.NewServer(admin.Routes(adminroutes.Routes(adminroutes.Config{Nodes: db})))
	t.Cleanup(srv.Close)
	c := cove.NewClient(cove.Config{APIURL: srv.URL, AdminToken: "t", APIKey: "k"})
	nodes, err := c.Nodes(ctx)
	if err != nil || len(nodes) != 3 || nodes[0].Name != "a" || nodes[0].MaxSandboxes != 4 || nodes[2].State != "lost" || nodes[2].LostAt == nil {
		t.Fatalf("nodes %+v %v", nodes, err)
	}
	n, err := c.DrainNode(ctx, "b")
	if err != nil || n.State != "draining" {
		t.Fatalf("drain %+v %v", n, err)
	}
	if _, err := cluster.Place(ctx, db, cluster.Request{SandboxID: "s1", TeamID: "t", VCPUs: 1, MemoryMB: 1}, nil); err != nil {
		t.Fatal(err)
	}
	if held, _ := db.PlacementsOn(ctx, "b"); len(held) != 0 {
		t.Fatal("a drained node was given a sandbox")
	}
	if n, err := c.ActivateNode(ctx, "b"); err != nil || n.State != "active" {
		t.Fatalf("activate %+v %v", n, err)
	}
	if _, err := c.DrainNode(ctx, "gone"); err == nil || !strings.Contains(err.Error(), "lost") {
		t.Fatalf("drain of a lost node: %v", err)
	}
	if _, err := c.DrainNode(ctx, "nowhere"); !errors.Is(err, cove.ErrNotFound) || !strings.Contains(err.Error(), "nowhere") {
		t.Fatalf("drain of an unknown node: %v", err)
	}
}
