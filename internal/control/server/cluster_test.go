package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/blob"
	"github.com/cove-dev/cove/internal/control/orchestrator"
	"github.com/cove-dev/cove/internal/control/snapshot"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/internal/store/postgres"
	"github.com/cove-dev/cove/internal/store/postgres/pgtest"
	"github.com/cove-dev/cove/sdk/requestid"
)

func TestCheckClusterFlags(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte(strings.Repeat("s", 40)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	short := filepath.Join(t.TempDir(), "short")
	if err := os.WriteFile(short, []byte("too short"), 0o600); err != nil {
		t.Fatal(err)
	}
	const pg = "postgres://cove@127.0.0.1:5432/cove"
	for _, tt := range []struct {
		name string
		cfg  ClusterConfig
		stat string
		want string // "" when it must pass
	}{
		{"a lone server", ClusterConfig{}, "", ""},
		{"advertise without a node", ClusterConfig{Advertise: "http://x:1"}, "", "need --node"},
		{"a bad node name", ClusterConfig{Node: "Node_A", Advertise: "http://x:1", SecretFile: secret}, pg, "--node"},
		{"sqlite", ClusterConfig{Node: "a", Advertise: "http://x:1", SecretFile: secret}, "", "postgres"},
		{"an advertise that is no URL", ClusterConfig{Node: "a", Advertise: "x:1", SecretFile: secret}, pg, "--advertise"},
		{"no secret", ClusterConfig{Node: "a", Advertise: "http://x:1"}, pg, "--cluster-secret-file"},
		{"a short secret", ClusterConfig{Node: "a", Advertise: "http://x:1", SecretFile: short}, pg, "at least 32"},
		{"a missing secret", ClusterConfig{Node: "a", Advertise: "http://x:1", SecretFile: short + "-none"}, pg, "--cluster-secret-file"},
		{"a node", ClusterConfig{Node: "node-a", Advertise: "http://10.0.0.1:3000", SecretFile: secret}, pg, ""},
	} {
		err := checkClusterFlags(Config{Cluster: tt.cfg, State: tt.stat})
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: %v, want an error naming %q", tt.name, err, tt.want)
		}
	}
	cfg := Config{Cluster: ClusterConfig{Node: "node-a"}}
	applyNodeNames(&cfg)
	rc, _, _ := nodeNames("node-a")
	if cfg.Network.Table != "cove_node_a" || len(cfg.Network.LinkPrefix) != 6 || rc.CgroupParent != "/cove-node-a" || rc.RuncRoot != "/run/cove/node-a/runc" {
		t.Errorf("names derived from node-a: %q %q %+v", cfg.Network.Table, cfg.Network.LinkPrefix, rc)
	}
	if _, other, link := nodeNames("node-b"); other == cfg.Network.Table || link == cfg.Network.LinkPrefix {
		t.Error("two nodes derive the same names")
	}
	if got := redactObjects("s3://u:p@bucket?endpoint=http://h:1"); strings.Contains(got, "u:p") {
		t.Errorf("redacted objects address %q keeps its user", got)
	}
	if orDefault(0, 8) != 8 || orDefault(3, 8) != 3 || !isCreate(httptest.NewRequest(http.MethodPost, "/sandboxes", nil)) {
		t.Error("helpers")
	}
	for path, want := range map[string]bool{"/sandboxes": true, "/v2/sandboxes": true, "/sandboxes/i1/pause": true, "/v2/sandboxes/i1/logs": true,
		"/admin/sandboxes/i1": true, "/templates": false, "/sandboxes/": false, "/events/sandboxes/i1": false,
		"/snapshots/" + snapshot.NewID(): true, "/snapshots": false, "/snapshots/not-an-id": false,
		"/volumes/vol-0123456789abcdef": true, "/volumecontent/vol-0123456789abcdef/file": true, "/volumes": false,
		"/volumes/by-name": false, "/volumecontent/by-name/dir": false} {
		if clusterPath(path) != want {
			t.Errorf("clusterPath(%q) is %v", path, !want)
		}
	}
	if v, m, d := nodeCapacity(t.TempDir()); v <= 0 || m <= 0 || d <= 0 {
		t.Errorf("capacity %d %d %d", v, m, d)
	}
}

// clusterRig is two nodes' forwarding on one real PostgreSQL: "a" under test, "b" an
// httptest server that checks a's signature with its own clusterNode and answers.
type clusterRig struct {
	db      *postgres.DB
	a, b    *clusterNode
	bServer *httptest.Server
	// bAnswer answers what reaches b after its signature check.
	bAnswer http.HandlerFunc
	sandbox string // a sandbox recorded on b
}

func newClusterRig(t *testing.T) *clusterRig {
	t.Helper()
	pg := pgtest.StartFor(t)
	ctx := context.Background()
	db, err := postgres.Open(ctx, pg.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	secret := []byte(strings.Repeat("k", 32))
	rig := &clusterRig{db: db}
	rig.bServer = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rig.b.serve(w, r, r.Header.Get("E2b-Sandbox-Id") != "", rig.bAnswer)
	}))
	t.Cleanup(rig.bServer.Close)
	if rig.a, err = newClusterNode("a", secret, db, db); err != nil {
		t.Fatal(err)
	}
	if rig.b, err = newClusterNode("b", secret, db, db); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*clusterNode{rig.a, rig.b} {
		c.local = func(context.Context, string) bool { return false }
		c.sandboxOf = func(r *http.Request) (string, bool) {
			id := r.Header.Get("E2b-Sandbox-Id")
			return id, id != ""
		}
	}
	// b has more room than a: placement ranks it first.
	for _, n := range []*store.Node{
		{Name: "a", AdvertiseURL: "http://127.0.0.1:1", VCPUs: 4, MemoryMB: 1024, MaxSandboxes: 10, MaxStarts: 4},
		{Name: "b", AdvertiseURL: rig.bServer.URL, VCPUs: 64, MemoryMB: 65536, MaxSandboxes: 100, MaxStarts: 8},
	} {
		if err := db.RegisterNode(ctx, n, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	team, err := db.CreateTeam(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	rig.sandbox = "ionb0000000000000001"
	if err := db.InsertSandbox(ctx, &store.Sandbox{ID: rig.sandbox, TeamID: team.ID, TemplateID: "base", State: store.StateRunning,
		StartedAt: now, EndAt: now.Add(time.Hour), UpdatedAt: now, Node: "b"}); err != nil {
		t.Fatal(err)
	}
	return rig
}

// do runs r through a's serve, its own answers written by local.
func (rig *clusterRig) do(r *http.Request, proxied bool) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	rig.a.serve(w, r, proxied, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusTeapot)
		fmt.Fprint(w, "answered by a")
	}))
	return w
}

func TestClusterForwarding(t *testing.T) {
	rig := newClusterRig(t)
	var seen *http.Request
	rig.bAnswer = func(w http.ResponseWriter, r *http.Request) {
		seen = r
		fmt.Fprintf(w, "answered by b: %s", r.URL.Path)
	}

	t.Run("an API call for b's sandbox is answered by b, signed, with its request id", func(t *testing.T) {
		r := httptest.NewRequest(http.MethodGet, "/sandboxes/"+rig.sandbox+"/logs", nil)
		w := rig.do(withRequestID(r, "req-forwarded-1"), false)
		if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "answered by b") {
			t.Fatalf("%d %s", w.Code, w.Body)
		}
		if seen.Header.Get(HeaderNodeForward) != "" {
			t.Error("b's handler saw the node signature: it is stripped once checked")
		}
		if seen.Header.Get(requestid.Header) != "req-forwarded-1" {
			t.Errorf("the request id reached b as %q", seen.Header.Get(requestid.Header))
		}
	})
	t.Run("a snapshot's delete is answered by the node holding its files", func(t *testing.T) {
		team, err := rig.db.CreateTeam(context.Background(), "snaps")
		if err != nil {
			t.Fatal(err)
		}
		onB, onA := snapshot.NewID(), snapshot.NewID()
		for id, node := range map[string]string{onB: "b", onA: "a"} {
			if err := rig.db.InsertSnapshot(context.Background(), &store.Snapshot{ID: id, Node: node, TeamID: team.ID, CreatedAt: time.Now().UTC()}); err != nil {
				t.Fatal(err)
			}
		}
		if w := rig.do(httptest.NewRequest(http.MethodDelete, "/snapshots/"+onB, nil), false); w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "answered by b") {
			t.Fatalf("delete of b's snapshot through a: %d %s", w.Code, w.Body)
		}
		if w := rig.do(httptest.NewRequest(http.MethodDelete, "/snapshots/"+onA, nil), false); w.Code != http.StatusTeapot {
			t.Fatalf("delete of a's own snapshot: %d %s, want it answered by a", w.Code, w.Body)
		}
	})
	t.Run("a volume's routes are answered by the node holding it, or here when none does", func(t *testing.T) {
		team, err := rig.db.CreateTeam(context.Background(), "vols")
		if err != nil {
			t.Fatal(err)
		}
		for id, node := range map[string]string{"vol-00000000000000b0": "b", "vol-00000000000000a0": "a", "vol-0000000000000000": ""} {
			if err := rig.db.InsertVolume(context.Background(), &store.Volume{ID: id, Node: node, TeamID: team.ID, Name: "v" + id[len(id)-2:], Token: "t", CreatedAt: time.Now().UTC()}); err != nil {
				t.Fatal(err)
			}
		}
		for _, path := range []string{"/volumes/vol-00000000000000b0", "/volumecontent/vol-00000000000000b0/file"} {
			if w := rig.do(httptest.NewRequest(http.MethodGet, path, nil), false); w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "answered by b") {
				t.Errorf("%s of b's volume through a: %d %s", path, w.Code, w.Body)
			}
		}
		for _, path := range []string{"/volumes/vol-00000000000000a0", "/volumecontent/vol-0000000000000000/dir"} {
			if w := rig.do(httptest.NewRequest(http.MethodGet, path, nil), false); w.Code != http.StatusTeapot {
				t.Errorf("%s: %d %s, want it answered by a", path, w.Code, w.Body)
			}
		}
	})
	t.Run("a sandbox's traffic follows it too", func(t *testing.T) {
		r := httptest.NewRequest(http.MethodPost, "/process.Process/Start", strings.NewReader("{}"))
		r.Header.Set("E2b-Sandbox-Id", rig.sandbox)
		if w := rig.do(r, true); w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "/process.Process/Start") {
			t.Fatalf("%d %s", w.Code, w.Body)
		}
	})
	t.Run("a sandbox no node holds is answered here", func(t *testing.T) {
		if w := rig.do(httptest.NewRequest(http.MethodGet, "/sandboxes/iunknown0000000000001", nil), false); w.Code != http.StatusTeapot {
			t.Fatalf("%d %s", w.Code, w.Body)
		}
	})
	t.Run("a forged node signature is refused", func(t *testing.T) {
		r := httptest.NewRequest(http.MethodGet, "/sandboxes/"+rig.sandbox, nil)
		r.Header.Set(HeaderNodeForward, fmt.Sprintf("b %d %s", time.Now().UnixMilli(), strings.Repeat("00", 32)))
		if w := rig.do(r, false); w.Code != http.StatusUnauthorized {
			t.Fatalf("%d %s", w.Code, w.Body)
		}
		for _, h := range []string{"b", "b x y", fmt.Sprintf("b %d sig", time.Now().Add(-time.Hour).UnixMilli())} {
			r.Header.Set(HeaderNodeForward, h)
			if ok, err := rig.a.forwarded(r); ok || err == nil {
				t.Errorf("%q verified", h)
			}
		}
	})
	t.Run("a create goes to the best node, and to the next when it has no room", func(t *testing.T) {
		full := true
		rig.bAnswer = func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			if full {
				w.Header().Set(HeaderNodeFull, "1")
				w.WriteHeader(http.StatusTooManyRequests)
				return
			}
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, "created on b from %s", body)
		}
		body := `{"templateID":"base"}`
		w := rig.do(httptest.NewRequest(http.MethodPost, "/sandboxes", strings.NewReader(body)), false)
		if w.Code != http.StatusTeapot || w.Header().Get(HeaderNodeFull) != "" {
			t.Fatalf("b full: %d %s %v", w.Code, w.Body, w.Header())
		}
		full = false
		w = rig.do(httptest.NewRequest(http.MethodPost, "/sandboxes", strings.NewReader(body)), false)
		if w.Code != http.StatusCreated || w.Body.String() != "created on b from "+body {
			t.Fatalf("b with room: %d %s", w.Code, w.Body)
		}
		// A create mounting a volume a holds goes to a first, though b has more room.
		for _, mounts := range []string{`[{"name":"vol-00000000000000a0","path":"/d"}]`, `[{"name":"va0","path":"/d"}]`} {
			w = rig.do(httptest.NewRequest(http.MethodPost, "/sandboxes", strings.NewReader(`{"templateID":"base","volumeMounts":`+mounts+`}`)), false)
			if w.Code != http.StatusTeapot {
				t.Errorf("a create mounting %s: %d %s, want it placed on a, which holds the volume", mounts, w.Code, w.Body)
			}
		}
	})
	t.Run("another node is asked to adopt, signed", func(t *testing.T) {
		rig.bAnswer = func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, `{}`) }
		nb, err := rig.db.GetNode(context.Background(), "b")
		if err != nil {
			t.Fatal(err)
		}
		// b serves /cluster/ only to a valid signature: its serve passes it to bAnswer.
		if err := rig.a.askAdopt(context.Background(), nb, rig.sandbox); err != nil {
			t.Fatal(err)
		}
		rig.bAnswer = func(w http.ResponseWriter, r *http.Request) { http.Error(w, "no", http.StatusConflict) }
		if err := rig.a.askAdopt(context.Background(), nb, rig.sandbox); err == nil || !strings.Contains(err.Error(), "409") {
			t.Fatalf("a refused adoption: %v", err)
		}
	})
	t.Run("the routes between nodes need a node's signature", func(t *testing.T) {
		s := &instance{cluster: rig.a}
		w := httptest.NewRecorder()
		s.internalEdge().ServeHTTP(w, httptest.NewRequest(http.MethodPost, adoptPath(rig.sandbox), nil))
		if w.Code != http.StatusUnauthorized {
			t.Fatalf("unsigned: %d %s", w.Code, w.Body)
		}
		r := httptest.NewRequest(http.MethodGet, "/cluster/sandboxes/x/nothing", nil)
		r.Header.Set(requestid.Header, "req-node") // a node signs its request id too
		r.Header.Set(HeaderNodeForward, rig.b.sign(r.Method, r.Host, r.URL.RequestURI(), "req-node", time.Now()))
		w = httptest.NewRecorder()
		s.internalEdge().ServeHTTP(w, r)
		if w.Code != http.StatusNotFound {
			t.Fatalf("an unknown route: %d %s", w.Code, w.Body)
		}
	})
	t.Run("checkpoints travel through the object store", func(t *testing.T) {
		objects, err := blob.OpenDir(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		m := checkpointMover{blobs: objects, nodes: rig.db}
		src := filepath.Join(t.TempDir(), "ck")
		if err := os.MkdirAll(filepath.Join(src, "sub"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, "sub", "pages.img"), bytes.Repeat([]byte{7}, 4096), 0o600); err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if _, err := m.Download(ctx, "inone", t.TempDir()); !errors.Is(err, orchestrator.ErrNotFound) {
			t.Fatalf("no checkpoint: %v", err)
		}
		if err := m.Upload(ctx, "ione", src); err != nil {
			t.Fatal(err)
		}
		dir, err := m.Download(ctx, "ione", t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(filepath.Join(dir, "sub", "pages.img")); err != nil || len(b) != 4096 {
			t.Fatalf("downloaded %d bytes: %v", len(b), err)
		}
		m.Forget(ctx, "ione")
		if _, err := m.Download(ctx, "ione", t.TempDir()); err == nil {
			t.Fatal("a forgotten checkpoint came back")
		}
		if !m.NodeAlive(ctx, "b") || m.NodeAlive(ctx, "nobody") {
			t.Error("NodeAlive")
		}
	})
}

// withRequestID gives r the request id the server's middleware would have put in its context.
func withRequestID(r *http.Request, id string) *http.Request {
	return r.WithContext(telemetry.WithRequestID(r.Context(), id))
}
