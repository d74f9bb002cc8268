package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/blob/blobtest"
	"github.com/cove-dev/cove/internal/covetest"
	"github.com/cove-dev/cove/internal/sandbox/network/nettest"
	"github.com/cove-dev/cove/internal/store/postgres/pgtest"
	cove "github.com/cove-dev/cove/sdk"
	"github.com/cove-dev/cove/sdk/reason"
)

// plantedToken is a secret env var of the cluster test's sandboxes: their collected output
// is masked of it on every node.
const plantedToken = "planted-cluster-token-5151515151"

// clusterNode is one `cove server --node` of a test cluster.
type clusterNode struct {
	name string
	srv  *covetest.Server
	c    *cove.Client
}

// freePort is a loopback port nothing listens on now: a node must know the address it
// advertises before it starts.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startCluster starts one cove server per name, each in a network namespace of its own with
// its own address in 198.18.0.0/15 (a nettest internet: a veth to the host, which forwards
// between them), as hosts of their own would be: one PostgreSQL and one S3 server (versitygw)
// on the host, reached through the first node's link, a cluster secret, a lease of lease.
// The first node's API key serves them all.
func startCluster(t *testing.T, lease time.Duration, names ...string) []*clusterNode {
	t.Helper()
	covetest.Skip(t)
	nettest.Skip(t)
	var nets []*nettest.Internet
	for range names {
		nets = append(nets, nettest.New(t))
	}
	host := nets[0].Gateway.String() // the host's address every node reaches
	pg, err := pgtest.Start(host + ":0")
	if err != nil {
		t.Skipf("no PostgreSQL for the cluster: %v", err)
	}
	t.Cleanup(pg.Stop)
	dsn := pg.NewDatabase(t)
	s3 := blobtest.Start(t, fmt.Sprintf("%s:%d", host, freePort(t)), "cove-cluster") // skips, saying why, without versitygw
	secret := filepath.Join(t.TempDir(), "cluster-secret")
	if err := os.WriteFile(secret, []byte("a-test-cluster-secret-of-forty-bytes-or-so\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Registered before the servers start, so it runs after they stopped: the host-wide
	// names the nodes derived from their names (node.go's runc root, netns dir and cgroup
	// parent) go with them.
	t.Cleanup(func() {
		for _, name := range names {
			for _, d := range []string{"/run/cove/" + name + "/runc", "/run/cove/" + name + "/runsc", "/run/cove/" + name + "/netns", "/run/cove/" + name} {
				if err := os.Remove(d); err != nil && !errors.Is(err, os.ErrNotExist) {
					t.Errorf("node %s left %v", name, err)
				}
			}
			parents, _ := filepath.Glob("/sys/fs/cgroup/*/cove-" + name)
			for _, p := range parents {
				if err := os.Remove(p); err != nil {
					t.Errorf("node %s left its cgroup: %v", name, err)
				}
			}
		}
	})
	var nodes []*clusterNode
	var key string
	for i, name := range names {
		data := t.TempDir()
		if key != "" {
			// The database made the team and its key with the first node; the harness reads
			// the key from the data dir.
			if err := os.WriteFile(filepath.Join(data, "initial-api-key"), []byte(key+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		addr := nets[i].Addr.String() + ":3000"
		// Each node has a template store of its own (the shared base linked in): what one
		// builds, the others fetch from the object store.
		srv := covetest.StartWith(t, data, covetest.Options{OnStop: "kill", Templates: covetest.OwnTemplates(t), Netns: nets[i].Netns,
			// Its sandboxes' addresses: a pool of the node's own namespace, apart from the
			// 198.18.0.0/15 it reaches the others by.
			Args: []string{"--state", dsn, "--node", name, "--objects", s3.URL("cove-cluster"), "--network-pool", "10.213.0.0/24",
				"--addr", addr, "--advertise", "http://" + addr, "--cluster-secret-file", secret, "--node-lease", lease.String()}})
		key = srv.Key
		nodes = append(nodes, &clusterNode{name: name, srv: srv,
			c: cove.NewClient(cove.Config{APIURL: srv.URL, APIKey: srv.Key, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})})
	}
	return nodes
}

// TestCluster runs three nodes on one PostgreSQL: creates through one node spread over the
// nodes, every node answers for every sandbox (API calls, commands, files) by forwarding to
// the one that holds it, a forged node signature is refused, and a node killed with SIGKILL
// is declared lost: its running sandboxes end with reason node_lost, seen from the others.
func TestCluster(t *testing.T) {
	// Names of this run's own: the host-wide names nodes derive from them (cgroups, run dirs)
	// never meet another run's.
	run := fmt.Sprintf("n%d", os.Getpid()%100000)
	nodes := startCluster(t, 3*time.Second, run+"-a", run+"-b", run+"-c")
	a, b := nodes[0], nodes[1]
	ctx := context.Background()

	held := map[string][]*cove.Sandbox{} // node → its sandboxes
	var all []*cove.Sandbox
	for i := range 6 {
		sb, err := a.c.Create(ctx, cove.SandboxOptions{Metadata: map[string]string{"n": fmt.Sprint(i)},
			EnvVars: map[string]string{"COVE_TEST_TOKEN": plantedToken}}) // masked in its logs wherever it runs
		if err != nil {
			t.Fatalf("create %d through %s: %v\n%s", i, a.name, err, a.srv.Logs())
		}
		info, err := b.c.Info(ctx, sb.ID)
		if err != nil {
			t.Fatalf("info of %s through %s: %v", sb.ID, b.name, err)
		}
		held[info.ClientID] = append(held[info.ClientID], sb)
		all = append(all, sb)
	}
	t.Logf("six creates through %s landed: %d on %s, %d on %s, %d on %s", a.name, len(held[nodes[0].name]), nodes[0].name,
		len(held[nodes[1].name]), nodes[1].name, len(held[nodes[2].name]), nodes[2].name)
	if len(held) < 2 {
		t.Fatalf("six creates all landed on one node: %v", keys(held))
	}
	for name := range held {
		if !strings.HasPrefix(name, run+"-") {
			t.Fatalf("clientID %q names no node", name)
		}
	}

	t.Run("every node answers for every sandbox", func(t *testing.T) {
		for _, sb := range all {
			for _, via := range nodes {
				conn, err := via.c.Connect(ctx, sb.ID, 0)
				if err != nil {
					t.Fatalf("connect to %s through %s: %v", sb.ID, via.name, err)
				}
				res, err := conn.Commands.Run(ctx, "hostname; echo via-"+via.name)
				if err != nil || !strings.Contains(res.Stdout, "via-"+via.name) {
					t.Fatalf("run in %s through %s: %+v %v", sb.ID, via.name, res, err)
				}
				path := "/tmp/from-" + via.name
				if _, err := conn.Files.Write(ctx, path, []byte(sb.ID+via.name)); err != nil {
					t.Fatalf("write in %s through %s: %v", sb.ID, via.name, err)
				}
				got, err := conn.Files.Read(ctx, path)
				if err != nil || string(got) != sb.ID+via.name {
					t.Fatalf("read in %s through %s: %q %v", sb.ID, via.name, got, err)
				}
			}
		}
	})

	// where reads which node holds each of the six now: drains move them.
	where := func(t *testing.T) map[string][]*cove.Sandbox {
		t.Helper()
		out := map[string][]*cove.Sandbox{}
		for _, sb := range all {
			info, err := a.c.Info(ctx, sb.ID)
			if err != nil {
				t.Fatalf("info of %s: %v", sb.ID, err)
			}
			out[info.ClientID] = append(out[info.ClientID], sb)
		}
		return out
	}

	t.Run("the npm SDK: six creates through node-a spread, and commands, files and a PTY work in each through node-a and node-b", func(t *testing.T) {
		covetest.RunSDKScenarios(t, "cluster.test.mjs", a.srv.URL, a.srv.Key, "COVE_OTHER_URL="+b.srv.URL)
		on, ids := map[string]int{}, []string{}
		for info, err := range a.c.List(ctx, cove.ListOptions{Metadata: map[string]string{"suite": "cluster-npm"}}) {
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, info.SandboxID)
			on[info.ClientID]++
		}
		for _, id := range ids {
			_ = a.c.Kill(ctx, id)
		}
		if len(ids) != 6 || len(on) < 2 {
			t.Fatalf("the npm SDK's six creates landed %v (%d listed), want at least two nodes", on, len(ids))
		}
		t.Logf("the npm SDK's six creates through %s landed %v", a.name, on)
	})

	t.Run("the npm SDK's scenarios through node-b cannot tell a cluster from one node", func(t *testing.T) {
		// Its creates land on any node; every call after goes through node-b.
		covetest.RunSDKScenarios(t, "server.test.mjs", b.srv.URL, b.srv.Key)
	})

	t.Run("each node's /metrics carries its node label", func(t *testing.T) {
		for _, n := range nodes {
			res, err := http.Get(n.srv.URL + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if !strings.Contains(string(body), `node="`+n.name+`"`) {
				t.Errorf("%s's /metrics has no node=%q label:\n%.500s", n.name, n.name, body)
			}
		}
	})

	t.Run("the console's nodes page on any node lists every node with its state", func(t *testing.T) {
		token, err := os.ReadFile(filepath.Join(b.srv.DataDir, "admin-token")) // each node's admin token is its own
		if err != nil {
			t.Fatal(err)
		}
		v := newViewer(t, b.srv.URL)
		v.signIn(strings.TrimSpace(string(token)))
		code, page := v.get("/dashboard/nodes")
		if code != http.StatusOK {
			t.Fatalf("GET /dashboard/nodes through %s: %d\n%.2000s", b.name, code, page)
		}
		for _, n := range nodes {
			if !strings.Contains(page, n.name) {
				t.Errorf("the nodes page through %s does not list %s:\n%.3000s", b.name, n.name, page)
			}
		}
		if !strings.Contains(page, "active") {
			t.Errorf("the nodes page shows no node active:\n%.3000s", page)
		}
	})

	t.Run("a template built through node-a starts on node-c", func(t *testing.T) {
		if _, err := a.c.BuildTemplate(ctx, "cluster-built", cove.TemplateDefinition{FromTemplate: "base",
			Steps: []cove.TemplateStep{{Type: "RUN", Args: []string{"echo built-through-a > /tmp/built.txt"}}}}, cove.TemplateBuildOptions{}); err != nil {
			t.Fatalf("build through %s: %v", a.name, err)
		}
		token, err := os.ReadFile(filepath.Join(a.srv.DataDir, "admin-token"))
		if err != nil {
			t.Fatal(err)
		}
		admin := cove.NewClient(cove.Config{APIURL: a.srv.URL, AdminToken: strings.TrimSpace(string(token))})
		// Only node-c takes creates while the others drain.
		for _, n := range nodes[:2] {
			if _, err := admin.DrainNode(ctx, n.name); err != nil {
				t.Fatalf("drain %s: %v", n.name, err)
			}
			t.Cleanup(func() { _, _ = admin.ActivateNode(context.Background(), n.name) })
		}
		sb, err := a.c.Create(ctx, cove.SandboxOptions{Template: "cluster-built"})
		if err != nil {
			t.Fatalf("create of the template built on %s: %v\n%s", a.name, err, nodes[2].srv.Logs())
		}
		defer sb.Kill(ctx)
		info, err := a.c.Info(ctx, sb.ID)
		if err != nil || info.ClientID != nodes[2].name {
			t.Fatalf("the create landed on %+v (%v), want node-c", info, err)
		}
		res, err := sb.Commands.Run(ctx, "cat /tmp/built.txt")
		if err != nil || res.Stdout != "built-through-a\n" {
			t.Fatalf("the template's file on node-c: %+v %v", res, err)
		}
		if !strings.Contains(nodes[2].srv.Logs(), `"msg":"template fetched from the object store"`) {
			t.Errorf("%s did not say it fetched the template", nodes[2].name)
		}
		for _, n := range nodes[:2] {
			if _, err := admin.ActivateNode(ctx, n.name); err != nil {
				t.Fatalf("activate %s: %v", n.name, err)
			}
		}
	})

	t.Run("a drain of node-c moves its running sandboxes, their processes and memory with them", func(t *testing.T) {
		c := nodes[2]
		held = where(t) // the template's drain of the others moved theirs here
		if len(held[c.name]) == 0 {
			t.Skip("no sandbox landed on node-c")
		}
		moving := held[c.name][0]
		if _, err := moving.Commands.Start(ctx, `bash -c 'v=$RANDOM$RANDOM; echo $v > /tmp/m; while sleep 0.2; do echo $v > /tmp/m2; done'`); err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond)
		want, err := moving.Files.Read(ctx, "/tmp/m")
		if err != nil {
			t.Fatal(err)
		}
		token, err := os.ReadFile(filepath.Join(a.srv.DataDir, "admin-token"))
		if err != nil {
			t.Fatal(err)
		}
		admin := cove.NewClient(cove.Config{APIURL: a.srv.URL, AdminToken: strings.TrimSpace(string(token))})
		// A client keeps running commands in it through node-a all along: each that starts
		// during the move waits out its pause and reaches the sandbox wherever it is; one under
		// way at the checkpoint has its stream cut (the pause ends every stream), nothing else.
		stop := make(chan struct{})
		var calls, failed, cut atomic.Int64
		var lastErr atomic.Value
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				case <-time.After(50 * time.Millisecond):
				}
				calls.Add(1)
				res, err := moving.Commands.Run(ctx, "echo alive")
				switch {
				case err != nil && (strings.Contains(err.Error(), "EOF") || strings.Contains(err.Error(), "stream") || strings.Contains(err.Error(), "was paused")):
					cut.Add(1) // under way at the checkpoint: the proxy ends it saying the sandbox was paused
				case err != nil || res.Stdout != "alive\n":
					failed.Add(1)
					lastErr.Store(fmt.Sprint(err))
				}
			}
		}()
		begun := time.Now()
		if _, err := admin.DrainNode(ctx, c.name); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = admin.ActivateNode(context.Background(), c.name) })
		for _, sb := range held[c.name] {
			for {
				info, err := a.c.Info(ctx, sb.ID)
				if err == nil && info.ClientID != c.name && info.State == cove.SandboxState("running") {
					t.Logf("%s moved from %s to %s", sb.ID, c.name, info.ClientID)
					break
				}
				if time.Since(begun) > 60*time.Second {
					t.Fatalf("%s still on %s 60 s into the drain: %+v %v\n%s", sb.ID, c.name, info, err, c.srv.Logs())
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
		t.Logf("drained %d sandboxes off %s in %s", len(held[c.name]), c.name, time.Since(begun).Round(10*time.Millisecond))
		time.Sleep(300 * time.Millisecond)
		close(stop)
		wg.Wait()
		if failed.Load() > 0 || cut.Load() > int64(len(held[c.name])) {
			t.Errorf("%d of %d commands run through %s during the move failed (%d cut); the last: %v", failed.Load(), calls.Load(), a.name, cut.Load(), lastErr.Load())
		}
		t.Logf("%d commands ran through %s during the move: %d cut at a checkpoint, none failed otherwise", calls.Load(), a.name, cut.Load())
		// Through the drained node too: it forwards to where the sandbox went.
		conn, err := c.c.Connect(ctx, moving.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Commands.Run(ctx, "rm -f /tmp/m2"); err != nil {
			t.Fatal(err)
		}
		var got []byte
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			if got, err = conn.Files.Read(ctx, "/tmp/m2"); err == nil && len(got) > 0 {
				break
			}
		}
		if string(got) != string(want) {
			t.Fatalf("after the drain the process writes %q, want %q from its memory", got, want)
		}
		// Its output is still masked of its secrets on the node it moved to: the set its old
		// node kept is in the shared store.
		if _, err := conn.Commands.Run(ctx, `echo "after-move:$COVE_TEST_TOKEN"`); err != nil {
			t.Fatal(err)
		}
		var line string
		for deadline := time.Now().Add(10 * time.Second); line == "" && time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			page, err := a.c.Logs(ctx, moving.ID, cove.LogQuery{Search: "after-move"})
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range page.Logs {
				if strings.Contains(l.Message, "after-move:") {
					line = l.Message
				}
			}
		}
		if line == "" || strings.Contains(line, plantedToken) {
			t.Errorf("the moved sandbox's output line is %q: want it collected, masked of its secret env var", line)
		}
		if _, err := admin.ActivateNode(ctx, c.name); err != nil {
			t.Fatal(err)
		}
		held = where(t)
		if len(held[c.name]) != 0 {
			t.Errorf("%d sandboxes still on the drained %s", len(held[c.name]), c.name)
		}
	})

	t.Run("a sandbox from a snapshot starts on the node holding the snapshot, asked through any node", func(t *testing.T) {
		src := all[0]
		info, err := a.c.Info(ctx, src.ID)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := src.Commands.Run(ctx, "echo in-the-snapshot > /tmp/snap"); err != nil {
			t.Fatal(err)
		}
		sn, err := a.c.CreateSnapshot(ctx, src.ID, "cluster-snap")
		if err != nil {
			t.Fatalf("snapshot %s on %s: %v", src.ID, info.ClientID, err)
		}
		for _, via := range nodes {
			sb, err := via.c.Create(ctx, cove.SandboxOptions{Template: sn.ID})
			if err != nil {
				t.Fatalf("create from the snapshot through %s: %v", via.name, err)
			}
			got, err := a.c.Info(ctx, sb.ID)
			if err != nil || got.ClientID != info.ClientID {
				t.Errorf("through %s the copy landed on %+v (%v), want %s, the snapshot's node", via.name, got, err, info.ClientID)
			}
			if res, err := sb.Commands.Run(ctx, "cat /tmp/snap"); err != nil || res.Stdout != "in-the-snapshot\n" {
				t.Errorf("the copy through %s: %+v %v", via.name, res, err)
			}
			_ = sb.Kill(ctx)
		}
		// Listed through every node, and deleted through one that does not hold it.
		for _, via := range nodes {
			list, err := via.c.ListSnapshots(ctx, cove.SnapshotFilter{SandboxID: src.ID})
			if err != nil || !slices.ContainsFunc(list, func(s cove.SnapshotInfo) bool { return s.ID == sn.ID }) {
				t.Errorf("the snapshots listed through %s: %+v %v, want %s", via.name, list, err, sn.ID)
			}
		}
		other := nodes[0]
		if other.name == info.ClientID {
			other = nodes[1]
		}
		if err := other.c.DeleteSnapshot(ctx, sn.ID); err != nil {
			t.Fatalf("delete the snapshot of %s through %s: %v", info.ClientID, other.name, err)
		}
		if _, err := a.c.Create(ctx, cove.SandboxOptions{Template: sn.ID}); err == nil {
			t.Error("a deleted snapshot still starts copies")
		}
	})

	t.Run("a forged node signature is refused", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodGet, a.srv.URL+"/sandboxes/"+all[0].ID, nil)
		req.Header.Set("X-API-Key", a.srv.Key)
		req.Header.Set("Cove-Node-Forward", fmt.Sprintf("%s %d %s", b.name, time.Now().UnixMilli(), strings.Repeat("ab", 32)))
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusUnauthorized {
			t.Fatalf("a forged Cove-Node-Forward: %s, want 401", res.Status)
		}
	})

	t.Run("a node killed with SIGKILL is lost: its sandboxes end with reason node_lost", func(t *testing.T) {
		held = where(t)
		victim := b
		if len(held[victim.name]) == 0 {
			victim = nodes[2]
		}
		if len(held[victim.name]) == 0 {
			t.Skip("no sandbox landed on node-b or node-c")
		}
		// Its first sandbox, paused to disk with a process holding a value in memory only,
		// resumes on another node once this one is lost; the rest run, and die with it.
		paused := held[victim.name][0]
		running := held[victim.name][1:]
		if _, err := paused.Commands.Start(ctx, `bash -c 'v=$RANDOM$RANDOM; echo $v > /tmp/v; while sleep 0.2; do echo $v > /tmp/v2; done'`); err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond)
		want, err := paused.Files.Read(ctx, "/tmp/v")
		if err != nil {
			t.Fatal(err)
		}
		if err := a.c.PauseWith(ctx, paused.ID, cove.PauseOptions{Kind: reason.PauseSnapshot}); err != nil {
			t.Fatalf("pause on %s: %v", victim.name, err)
		}
		// A named snapshot on it too: its copies start on the other nodes once it is gone,
		// from the object store's copy of its files.
		var orphan *cove.SnapshotInfo
		if len(running) > 0 {
			if _, err := running[0].Commands.Run(ctx, "echo before-the-loss > /tmp/lost"); err != nil {
				t.Fatal(err)
			}
			if orphan, err = a.c.CreateSnapshot(ctx, running[0].ID, "of-a-lost-node"); err != nil {
				t.Fatalf("snapshot on %s: %v", victim.name, err)
			}
		}
		begun := time.Now()
		victim.srv.Crash()
		for _, sb := range running {
			for {
				_, err := a.c.Info(ctx, sb.ID)
				var killed *cove.SandboxKilledError
				if errors.As(err, &killed) {
					if killed.Reason != reason.KillNodeLost {
						t.Fatalf("%s of the lost %s was killed with %s, want node_lost", sb.ID, victim.name, killed.Reason)
					}
					break
				}
				if time.Since(begun) > 30*time.Second {
					t.Fatalf("%s of %s not declared dead 30 s after its node was killed: %v", sb.ID, victim.name, err)
				}
				time.Sleep(200 * time.Millisecond)
			}
		}
		t.Logf("%d running sandboxes of %s read node_lost %s after its SIGKILL", len(running), victim.name, time.Since(begun).Round(100*time.Millisecond))
		resumed, err := a.c.Connect(ctx, paused.ID, 0)
		if err != nil {
			t.Fatalf("resume %s, paused on the lost %s, through %s: %v\n%s", paused.ID, victim.name, a.name, err, a.srv.Logs())
		}
		info, err := a.c.Info(ctx, paused.ID)
		if err != nil || info.ClientID == victim.name {
			t.Fatalf("the resumed sandbox is on %+v (%v), not off the lost node", info, err)
		}
		if _, err := resumed.Commands.Run(ctx, "rm -f /tmp/v2"); err != nil {
			t.Fatal(err)
		}
		var got []byte
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			if got, err = resumed.Files.Read(ctx, "/tmp/v2"); err == nil && len(got) > 0 {
				break
			}
		}
		if string(got) != string(want) {
			t.Fatalf("after the move to %s the process writes %q, want %q from its memory", info.ClientID, got, want)
		}
		t.Logf("%s, paused on %s, resumed on %s with its process and memory", paused.ID, victim.name, info.ClientID)
		if orphan != nil {
			sb, err := a.c.Create(ctx, cove.SandboxOptions{Template: orphan.ID})
			if err != nil {
				t.Fatalf("create from %s's snapshot after its loss: %v\n%s", victim.name, err, a.srv.Logs())
			}
			got, err := a.c.Info(ctx, sb.ID)
			if err != nil || got.ClientID == victim.name {
				t.Errorf("the copy of the lost node's snapshot is on %+v (%v)", got, err)
			}
			if res, err := sb.Commands.Run(ctx, "cat /tmp/lost"); err != nil || res.Stdout != "before-the-loss\n" {
				t.Errorf("the copy of the lost node's snapshot: %+v %v", res, err)
			}
			_ = sb.Kill(ctx)
			// Deleted while its node is gone: its record and its object store copy go.
			if err := a.c.DeleteSnapshot(ctx, orphan.ID); err != nil {
				t.Fatalf("delete the lost node's snapshot: %v", err)
			}
			if _, err := a.c.Create(ctx, cove.SandboxOptions{Template: orphan.ID}); err == nil {
				t.Error("a deleted snapshot of the lost node still starts copies")
			}
		}
		if len(running) == 0 {
			return
		}
		evs, err := a.c.Events(ctx, running[0].ID, cove.EventOptions{})
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, e := range evs {
			if e.Type == cove.EventSandboxKilled && strings.Contains(string(e.EventData), "node_lost") && strings.Contains(string(e.EventData), victim.name) {
				found = true
			}
		}
		if !found {
			t.Errorf("no sandbox.killed event naming node_lost and %s: %+v", victim.name, evs)
		}
		// cove explain, through another node, names the lost node and its last heartbeat.
		cmd := exec.Command(covetest.Binary(t), "explain", running[0].ID, "--api-url", nodes[2].srv.URL, "--api-key", a.srv.Key)
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "node_lost") || !strings.Contains(string(out), "node "+victim.name+" lost: last heartbeat ") {
			t.Errorf("cove explain of a node_lost sandbox: %v\n%s", err, out)
		}
		// Back again, the lost node resurrects none of them: their records say node_lost, and
		// what still ran of them on its host is destroyed at its start.
		victim.srv.Restart()
		for _, sb := range running {
			var killed *cove.SandboxKilledError
			if _, err := victim.c.Info(ctx, sb.ID); !errors.As(err, &killed) || killed.Reason != reason.KillNodeLost {
				t.Errorf("%s after %s came back: %v, want killed with node_lost", sb.ID, victim.name, err)
			}
			if !strings.Contains(victim.srv.Logs(), `"recover: destroyed leftover sandbox without a record","service":"server","request_id":"system","sandbox.id":"`+sb.ID+`"`) {
				t.Errorf("%s back did not destroy what ran of %s", victim.name, sb.ID)
			}
		}
		// The others' sandboxes live on.
		for name, sbs := range held {
			if name == victim.name {
				continue
			}
			for _, sb := range sbs {
				if _, err := a.c.Info(ctx, sb.ID); err != nil {
					t.Errorf("%s on %s, which lives: %v", sb.ID, name, err)
				}
			}
		}
	})

	// Last: its drains move the other nodes' sandboxes too.
	t.Run("a sandbox with a volume is drained to another node with the volume's files, which every node serves", func(t *testing.T) {
		vol, err := a.c.CreateVolumeWith(ctx, "cluster-vol", cove.VolumeOptions{SizeMB: 128})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = a.c.DeleteVolume(context.Background(), vol.ID) }) // after the sandboxes that mount it
		sb, err := a.c.Create(ctx, cove.SandboxOptions{VolumeMounts: []cove.VolumeMount{{Name: "cluster-vol", Path: "/mnt/vol"}}})
		if err != nil {
			t.Fatalf("create with the volume through %s: %v", a.name, err)
		}
		killed := false
		t.Cleanup(func() {
			if !killed {
				_ = sb.Kill(context.Background())
			}
		})
		info, err := a.c.Info(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		from := info.ClientID
		if from != a.name { // the volume was made through node-a, which holds it
			t.Errorf("the create with a volume node-a holds landed on %s: want node-a, which mounts it without a copy", from)
		}
		// 64 MiB of the volume written: what the drain carries.
		sum, err := sb.Commands.Run(ctx, "echo before-the-drain > /mnt/vol/kept.txt && head -c 67108864 /dev/urandom > /mnt/vol/blob && sync && sha256sum /mnt/vol/blob")
		if err != nil || sum.ExitCode != 0 {
			t.Fatalf("write in the volume: %+v %v", sum, err)
		}
		token, err := os.ReadFile(filepath.Join(a.srv.DataDir, "admin-token"))
		if err != nil {
			t.Fatal(err)
		}
		admin := cove.NewClient(cove.Config{APIURL: a.srv.URL, AdminToken: strings.TrimSpace(string(token))})
		drain := func(t *testing.T, node string) {
			t.Helper()
			if _, err := admin.DrainNode(ctx, node); err != nil {
				t.Fatalf("drain %s: %v", node, err)
			}
			t.Cleanup(func() { _, _ = admin.ActivateNode(context.Background(), node) })
		}
		begun := time.Now()
		drain(t, from)
		for {
			info, err = a.c.Info(ctx, sb.ID)
			if err == nil && info.ClientID != from && info.State == cove.SandboxState("running") {
				break
			}
			if time.Since(begun) > 60*time.Second {
				var logs string
				for _, n := range nodes {
					if n.name == from {
						logs = n.srv.Logs()
					}
				}
				t.Fatalf("%s still on %s 60 s into the drain: %+v %v\n%s", sb.ID, from, info, err, logs)
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Logf("the sandbox with 64 MiB written in its volume moved from %s to %s %s into the drain", from, info.ClientID, time.Since(begun).Round(10*time.Millisecond))
		for _, n := range nodes {
			if n.name != from && n.name != info.ClientID {
				continue
			}
			// The move itself, as the nodes timed it (the drain moves the node's other
			// sandboxes too, one after the other).
			for _, line := range strings.Split(n.srv.Logs(), "\n") {
				if strings.Contains(line, sb.ID) && (strings.Contains(line, `"msg":"volume published for the move"`) || strings.Contains(line, `"msg":"sandbox moved to another node"`)) ||
					strings.Contains(line, vol.ID) && strings.Contains(line, `"msg":"volume fetched from the object store"`) {
					if _, ms, ok := strings.Cut(line, `"duration_ms":`); ok {
						msg, _, _ := strings.Cut(line[strings.Index(line, `"msg":"`)+7:], `"`)
						t.Logf("%s: %s ms", msg, strings.TrimRight(strings.SplitN(ms, ",", 2)[0], "}"))
					}
				}
			}
		}
		if _, err := admin.ActivateNode(ctx, from); err != nil {
			t.Fatal(err)
		}
		again, err := sb.Commands.Run(ctx, "cat /mnt/vol/kept.txt && sha256sum /mnt/vol/blob && echo after-the-drain > /mnt/vol/after.txt")
		if err != nil || again.Stdout != "before-the-drain\n"+sum.Stdout {
			t.Fatalf("the volume after the drain reads %+v %v, want its file and %q", again, err, sum.Stdout)
		}
		// The volume content API through every node (every node alive: the one killed above
		// may be gone still): the node holding the volume answers.
		live, err := admin.Nodes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, via := range nodes {
			if !slices.ContainsFunc(live, func(n cove.Node) bool { return n.Name == via.name && n.State == "active" }) {
				continue
			}
			got, err := via.c.VolumeFiles(vol.ID).Read(ctx, "/after.txt")
			if err != nil || string(got) != "after-the-drain\n" {
				t.Errorf("the volume's file read through %s: %q %v", via.name, got, err)
			}
		}

		// A snapshot of it mounts the volume: a clear 409 naming the volume while the sandbox
		// holds it read-write; once it is gone, its copy starts on another node than the
		// snapshot's, the volume fetched there.
		snapNode := info.ClientID
		sn, err := a.c.CreateSnapshot(ctx, sb.ID, "cluster-vol-snap")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = a.c.DeleteSnapshot(context.Background(), sn.ID) })
		if _, err := a.c.Create(ctx, cove.SandboxOptions{Template: sn.ID}); !errors.Is(err, cove.ErrConflict) || !strings.Contains(err.Error(), "cluster-vol") {
			t.Fatalf("a copy while the sandbox mounts the volume read-write: %v, want a 409 naming the volume", err)
		}
		if err := sb.Kill(ctx); err != nil {
			t.Fatal(err)
		}
		killed = true
		drain(t, snapNode) // its copies start elsewhere
		var cp *cove.Sandbox
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			if cp, err = a.c.Create(ctx, cove.SandboxOptions{Template: sn.ID}); err == nil || time.Now().After(deadline) {
				break
			}
		}
		if err != nil {
			t.Fatalf("a copy of the snapshot with its volume, %s draining: %v", snapNode, err)
		}
		defer cp.Kill(ctx)
		got, err := a.c.Info(ctx, cp.ID)
		if err != nil || got.ClientID == snapNode {
			t.Errorf("the copy landed on %+v (%v), want another node than the snapshot's %s", got, err, snapNode)
		}
		if res, err := cp.Commands.Run(ctx, "cat /mnt/vol/after.txt"); err != nil || res.Stdout != "after-the-drain\n" {
			t.Errorf("the copy's volume: %+v %v", res, err)
		}
		if _, err := admin.ActivateNode(ctx, snapNode); err != nil {
			t.Fatal(err)
		}
	})
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
