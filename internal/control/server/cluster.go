package server

import (
	"bytes"
	"context"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cove-dev/cove/internal/blob"
	"github.com/cove-dev/cove/internal/control/api/adminroutes"
	"github.com/cove-dev/cove/internal/control/cluster"
	"github.com/cove-dev/cove/internal/control/orchestrator"
	"github.com/cove-dev/cove/internal/control/snapshot"
	"github.com/cove-dev/cove/internal/errdefs"
	"github.com/cove-dev/cove/internal/httpx"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/sandbox/runtime"
	"github.com/cove-dev/cove/internal/store"
	cove "github.com/cove-dev/cove/sdk"
	"github.com/cove-dev/cove/sdk/requestid"
)

// ClusterConfig makes the server one node of a cluster (issue 24): nodes share one
// PostgreSQL store (--state), and each answers every API call and sandbox request,
// forwarding to the node that holds the sandbox.
type ClusterConfig struct {
	// Node names this server in the cluster: 1 to 24 of [a-z0-9-], starting with a letter.
	// Every host-wide name it uses (nftables table, veth prefix, cgroup parent, runc root,
	// network namespaces) derives from it, so several nodes can share a host. "" is no
	// cluster.
	Node string
	// Advertise is the URL the other nodes reach this one's API at (http://ADDR:PORT).
	Advertise string
	// SecretFile holds the cluster's shared secret (at least 32 bytes): it signs the
	// requests nodes forward to each other and keys the vault every node seals records with.
	SecretFile string
	// MaxSandboxes and MaxStarts bound the sandboxes this node runs and starts at once
	// (200 and 8 when 0).
	MaxSandboxes, MaxStarts int
	// VCPUs is the vCPUs this node offers its sandboxes' reservations: time-shared, so
	// more than the host's CPUs (when 0, two per sandbox of MaxSandboxes, or 8 per host CPU
	// if that is more): memory and the sandbox count bound a node first.
	VCPUs int
	// Lease is how long a renewal keeps the node alive (every Lease/5); 10 s when 0. A node
	// whose lease lapses is declared lost by the others.
	Lease time.Duration
}

func (c ClusterConfig) on() bool { return c.Node != "" }

var validNode = regexp.MustCompile(`^[a-z][a-z0-9-]{0,23}$`)

// checkClusterFlags refuses a cluster configuration that cannot work, before anything starts.
func checkClusterFlags(cfg Config) error {
	c := cfg.Cluster
	if !c.on() {
		if c.Advertise != "" || c.SecretFile != "" {
			return errors.New("--advertise and --cluster-secret-file need --node")
		}
		return nil
	}
	if !validNode.MatchString(c.Node) {
		return fmt.Errorf("--node %q must be 1 to 24 of [a-z0-9-], starting with a letter", c.Node)
	}
	if where, err := ParseState(cfg.State); err != nil || where.Engine != EnginePostgres {
		return errors.New("--node needs a shared --state postgres://…: a cluster's nodes keep their records in one PostgreSQL database")
	}
	u, err := url.Parse(c.Advertise)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
		return fmt.Errorf("--advertise %q must be the URL other nodes reach this one at, as http://HOST:PORT", c.Advertise)
	}
	if c.SecretFile == "" {
		return errors.New("--node needs --cluster-secret-file: the secret the cluster's nodes share")
	}
	if _, err := readClusterSecret(c.SecretFile); err != nil {
		return err
	}
	return nil
}

// readClusterSecret reads the cluster's shared secret: at least 32 bytes, surrounding
// white space ignored.
func readClusterSecret(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--cluster-secret-file: %w", err)
	}
	b = bytes.TrimSpace(b)
	if len(b) < 32 {
		return nil, fmt.Errorf("--cluster-secret-file %s: the secret is %d bytes, it must be at least 32 (head -c 32 /dev/urandom | base64)", path, len(b))
	}
	return b, nil
}

// clusterKey derives a key for one use (purpose) from the cluster's secret.
func clusterKey(secret []byte, purpose string) ([]byte, error) {
	return hkdf.Key(sha256.New, secret, nil, "cove cluster "+purpose, 32)
}

// nodeNames are the host-wide names a node derives from its name, so that several nodes
// share a host: its runc and runsc state, network namespaces and cgroup parent, its nftables
// table and veth prefix.
func nodeNames(node string) (runtime.Config, string, string) {
	h := fnv.New32a()
	h.Write([]byte(node))
	table := "cove_" + strings.ReplaceAll(node, "-", "_")
	link := fmt.Sprintf("c%05x", h.Sum32()&0xfffff) // 6 of [a-z0-9], as network wants
	return runtime.Config{
		RuncRoot:     "/run/cove/" + node + "/runc",
		RunscRoot:    "/run/cove/" + node + "/runsc",
		NetnsDir:     "/run/cove/" + node + "/netns",
		CgroupParent: "/cove-" + node,
	}, table, link
}

// applyNodeNames sets the names a node derives from its name where the operator set none.
func applyNodeNames(cfg *Config) {
	if !cfg.Cluster.on() {
		return
	}
	_, table, link := nodeNames(cfg.Cluster.Node)
	if cfg.Network.Table == "" {
		cfg.Network.Table = table
	}
	if cfg.Network.LinkPrefix == "" {
		cfg.Network.LinkPrefix = link
	}
}

// Forwarding. A request for a sandbox another node holds goes to that node: its API
// routes (/sandboxes/{id}/…) and its traffic (E2b-Sandbox-Id, {port}-{id}.{domain}), with
// the request's id, so one request is one trace across nodes. A forwarded request carries
// the forwarding node's signature (HeaderNodeForward), which the other node checks and then
// serves it itself: a request is forwarded once at most.

// HeaderNodeForward signs a request one node forwards to another:
// "<node> <unix ms> <hex HMAC-SHA256>" over the node, the time, the method, the Host, the
// path and query, and the request id, with a key derived from the cluster's secret.
const HeaderNodeForward = "Cove-Node-Forward"

// headerNodeHops marks a request a node forwards a second time (its sandbox moved on while
// the first hop was under way): the node it reaches answers it, never forwarding it again.
const headerNodeHops = "Cove-Node-Hops"

// forwardSkew is how far a forwarded request's time may be from the receiver's clock.
const forwardSkew = time.Minute

type clusterNode struct {
	name    string
	signKey []byte
	nodes   store.Nodes
	// local says whether this node holds the sandbox (in its memory), once a move of it
	// under way is over: served here at once.
	local func(ctx context.Context, id string) bool
	// sandboxOf names the sandbox a proxied request is for.
	sandboxOf func(r *http.Request) (string, bool)
	// records reads a sandbox's record (its node).
	records store.Sandboxes
	// snapshots reads a snapshot's record (the node holding its files).
	snapshots store.Snapshots
	// volumes reads a volume's record (the node holding its live files).
	volumes store.Volumes
	fwd     *httputil.ReverseProxy

	mu     sync.Mutex
	owners map[string]ownerEntry // sandbox id → its node, for a few seconds
}

type ownerEntry struct {
	node *store.Node
	at   time.Time
}

// ownerTTL is how long a sandbox's node is remembered: a moved or lost sandbox is found again
// within it.
const ownerTTL = 2 * time.Second

func newClusterNode(name string, secret []byte, nodes store.Nodes, records interface {
	store.Sandboxes
	store.Snapshots
	store.Volumes
}) (*clusterNode, error) {
	key, err := clusterKey(secret, "forward")
	if err != nil {
		return nil, err
	}
	c := &clusterNode{name: name, signKey: key, nodes: nodes, records: records, snapshots: records, volumes: records, owners: map[string]ownerEntry{}}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	c.fwd = &httputil.ReverseProxy{
		Rewrite:       c.rewrite,
		Transport:     tr,
		FlushInterval: -1, // streams (commands' output, watches) pass each write on at once
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			httpx.WriteError(r.Context(), w, fmt.Errorf("%w: forward to node %s: %v", errdefs.ErrUnavailable, forwardTarget(r), err))
		},
	}
	return c, nil
}

type targetKey struct{}

// forwardTarget is the node a request was forwarded to, for errors.
func forwardTarget(r *http.Request) string {
	if n, ok := r.Context().Value(targetKey{}).(*store.Node); ok {
		return n.Name
	}
	return "?"
}

func (c *clusterNode) rewrite(pr *httputil.ProxyRequest) {
	n := pr.In.Context().Value(targetKey{}).(*store.Node)
	u, _ := url.Parse(n.AdvertiseURL)
	pr.SetURL(u)
	pr.Out.Host = pr.In.Host // {port}-{id}.{domain} routes on the other node as here
	pr.SetXForwarded()
	id := telemetry.RequestID(pr.In.Context())
	if id != "" {
		pr.Out.Header.Set(requestid.Header, id)
	}
	pr.Out.Header.Set(HeaderNodeForward, c.sign(pr.Out.Method, pr.Out.Host, pr.Out.URL.RequestURI(), id, time.Now()))
}

func (c *clusterNode) mac(node, ts, method, host, uri, reqID string) string {
	m := hmac.New(sha256.New, c.signKey)
	for _, s := range []string{node, ts, method, host, uri, reqID} {
		m.Write([]byte(s))
		m.Write([]byte{0})
	}
	return hex.EncodeToString(m.Sum(nil))
}

func (c *clusterNode) sign(method, host, uri, reqID string, now time.Time) string {
	ts := strconv.FormatInt(now.UnixMilli(), 10)
	return c.name + " " + ts + " " + c.mac(c.name, ts, method, host, uri, reqID)
}

// forwarded checks a request's node signature: false when it has none, an error when it has
// one that does not verify (a request must not pose as a node's).
func (c *clusterNode) forwarded(r *http.Request) (bool, error) {
	h := r.Header.Get(HeaderNodeForward)
	if h == "" {
		return false, nil
	}
	parts := strings.Fields(h)
	if len(parts) != 3 {
		return false, fmt.Errorf("%w: %s is not \"<node> <unix ms> <signature>\"", errdefs.ErrUnauthenticated, HeaderNodeForward)
	}
	ms, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil || time.Since(time.UnixMilli(ms)).Abs() > forwardSkew {
		return false, fmt.Errorf("%w: %s is older than %s or from a clock that is off", errdefs.ErrUnauthenticated, HeaderNodeForward, forwardSkew)
	}
	want := c.mac(parts[0], parts[1], r.Method, r.Host, r.URL.RequestURI(), r.Header.Get(requestid.Header))
	if !hmac.Equal([]byte(want), []byte(parts[2])) {
		return false, fmt.Errorf("%w: %s does not verify with this cluster's secret", errdefs.ErrUnauthenticated, HeaderNodeForward)
	}
	return true, nil
}

// sandboxPath names the sandbox of an API path /sandboxes/{id}[/…] (also under /v2 and
// /admin); not a create or a list.
func sandboxPath(path string) (string, bool) {
	for _, prefix := range []string{"/sandboxes/", "/v2/sandboxes/", "/admin/sandboxes/"} {
		if rest, ok := strings.CutPrefix(path, prefix); ok {
			id, _, _ := strings.Cut(rest, "/")
			return id, id != ""
		}
	}
	return "", false
}

// snapshotPath names the snapshot of an API path /snapshots/{id} (its delete).
func snapshotPath(path string) (string, bool) {
	id, ok := strings.CutPrefix(path, "/snapshots/")
	return id, ok && snapshot.IsID(id)
}

// volumePath names the volume of an API path /volumes/{id} or /volumecontent/{id}/… (by id:
// a volume named by its name is served where the request lands, which fetches it).
func volumePath(path string) (string, bool) {
	for _, prefix := range []string{"/volumes/", "/volumecontent/"} {
		if rest, ok := strings.CutPrefix(path, prefix); ok {
			id, _, _ := strings.Cut(rest, "/")
			return id, snapshot.IsVolumeID(id)
		}
	}
	return "", false
}

// clusterPath says whether an API path may be another node's to answer: a sandbox's
// routes, a snapshot's (its files are on its node), a volume's (its live files are on the
// node that holds it), and a create (placed on the best node).
func clusterPath(path string) bool {
	_, ok := sandboxPath(path)
	_, snap := snapshotPath(path)
	_, vol := volumePath(path)
	return ok || snap || vol || createPath(path)
}

// HeaderNodeFull marks a create's answer when the node that tried it had no room
// (store.ErrNodeFull): the node that placed it tries the next one.
const HeaderNodeFull = "Cove-Node-Full"

// maxPlacements is how many nodes one create tries, best first.
const maxPlacements = 3

// route decides where a request for one sandbox is served: nil here, or the node to
// forward it to.
func (c *clusterNode) route(r *http.Request, proxied bool) (*store.Node, error) {
	var id string
	var ok bool
	if proxied {
		id, ok = c.sandboxOf(r)
	} else if sn, isSnap := snapshotPath(r.URL.Path); isSnap {
		return c.snapshotOwner(r.Context(), sn), nil
	} else if vol, isVol := volumePath(r.URL.Path); isVol {
		// The node that holds its live files answers; none (it is in the object store) or a
		// lost one: this node, which fetches it.
		if v, err := c.volumes.GetVolume(r.Context(), vol); err == nil {
			return c.liveOther(r.Context(), v.Node), nil
		}
		return nil, nil
	} else {
		id, ok = sandboxPath(r.URL.Path)
	}
	if !ok || c.local(r.Context(), id) {
		return nil, nil
	}
	return c.ownerOf(r.Context(), id), nil
}

// ownerOf is the live node that holds sandbox id when that is another node; nil when it is
// this one, the sandbox is unknown, or its node is not alive (then the record answers here).
func (c *clusterNode) ownerOf(ctx context.Context, id string) *store.Node {
	c.mu.Lock()
	e, hit := c.owners[id]
	c.mu.Unlock()
	if hit && time.Since(e.at) < ownerTTL {
		return e.node
	}
	var owner *store.Node
	if sb, err := c.records.GetSandbox(ctx, id); err == nil {
		owner = c.liveOther(ctx, sb.Node)
	}
	c.mu.Lock()
	if len(c.owners) > 100_000 {
		clear(c.owners)
	}
	c.owners[id] = ownerEntry{node: owner, at: time.Now()}
	c.mu.Unlock()
	return owner
}

// snapshotOwner is the live node holding snapshot id's files when that is another node; nil
// when it is this one, the snapshot is unknown, or its node is not alive.
func (c *clusterNode) snapshotOwner(ctx context.Context, id string) *store.Node {
	sn, err := c.snapshots.GetSnapshot(ctx, id)
	if err != nil {
		return nil
	}
	return c.liveOther(ctx, sn.Node)
}

// liveOther is node when it is another node than this one and runs its sandboxes (active or
// draining); nil otherwise (this node, none, or one lost).
func (c *clusterNode) liveOther(ctx context.Context, node string) *store.Node {
	if node == "" || node == c.name {
		return nil
	}
	if n, err := c.nodes.GetNode(ctx, node); err == nil && n.State.Holds() {
		return n
	}
	return nil
}

// createBody is what placement reads of a create: its template (a node that caches it
// starts it without a download) and its volumes (the node that holds them mounts them
// without a copy).
type createBody struct {
	TemplateID   string             `json:"templateID"`
	VolumeMounts []cove.VolumeMount `json:"volumeMounts"`
}

// createPath says whether an API path is where sandboxes are created (and listed): E2B's
// /sandboxes, or /v2/sandboxes, which the npm SDK 2.x creates by.
func createPath(path string) bool { return path == "/sandboxes" || path == "/v2/sandboxes" }

// isCreate says whether r creates a sandbox (placed on the best node).
func isCreate(r *http.Request) bool { return r.Method == http.MethodPost && createPath(r.URL.Path) }

// serve answers r here (next) or forwards it to the node that holds its sandbox; a create
// goes to the best nodes in turn until one has room.
func (c *clusterNode) serve(w http.ResponseWriter, r *http.Request, proxied bool, next http.Handler) {
	forwarded, err := c.forwarded(r)
	if err != nil {
		httpx.WriteError(r.Context(), w, err)
		return
	}
	r.Header.Del(HeaderNodeForward) // checked: neither the API nor a sandbox's port sees it
	switch {
	case !proxied && isCreate(r) && forwarded:
		c.createHere(w, r, next) // placed here by another node: say if there is no room
	case !proxied && isCreate(r):
		c.placeCreate(w, r, next)
	case forwarded && r.Header.Get(headerNodeHops) != "":
		next.ServeHTTP(w, r) // forwarded twice already: answered here, whatever it finds
	case forwarded:
		// Another node sent it here; if the sandbox has moved on meanwhile (a drain), it
		// follows once more, marked so that it goes no further.
		n, err := c.route(r, proxied)
		if err != nil || n == nil {
			next.ServeHTTP(w, r)
			return
		}
		r.Header.Set(headerNodeHops, "2")
		c.forward(w, r, n)
	default:
		n, err := c.route(r, proxied)
		if err != nil {
			httpx.WriteError(r.Context(), w, err)
			return
		}
		if n == nil {
			next.ServeHTTP(w, r)
			return
		}
		c.forward(w, r, n)
	}
}

// forward passes r to node n, streaming its answer back.
func (c *clusterNode) forward(w http.ResponseWriter, r *http.Request, n *store.Node) {
	telemetry.Logger(r.Context()).Debug("request forwarded", telemetry.KeyNodeTo, n.Name)
	// Full duplex with a guarded body, as the proxy into a sandbox does: a node that answers a
	// stream before this one has sent the client's body's end must not cut it.
	httpx.ServeProxied(c.fwd, w, r.WithContext(context.WithValue(r.Context(), targetKey{}, n)))
}

// createHere runs a create on this node, its answer marked HeaderNodeFull when this node
// had no room for it.
func (c *clusterNode) createHere(w http.ResponseWriter, r *http.Request, next http.Handler) {
	ctx, full := orchestrator.WatchNodeFull(r.Context())
	rec := &bufferedResponse{header: http.Header{}}
	next.ServeHTTP(rec, r.WithContext(ctx))
	if full() {
		rec.header.Set(HeaderNodeFull, "1")
	}
	rec.copyTo(w)
}

// placeCreate tries a create on the best nodes in turn (this one, or forwarded), moving on
// from a node that had no room, and answers the first other outcome. Each node reserves its
// room atomically as it creates (orchestrator.Placement), so racing creates never
// overcommit one; ranking only picks the order.
func (c *clusterNode) placeCreate(w http.ResponseWriter, r *http.Request, next http.Handler) {
	// The API reads at most 1 MiB of a create (and refuses more): one byte past it is kept,
	// so the node that runs the create refuses it the same way.
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20+1))
	if err != nil {
		httpx.WriteError(r.Context(), w, fmt.Errorf("%w: read body: %v", errdefs.ErrInvalidArgument, err))
		return
	}
	var cb createBody
	_ = json.Unmarshal(body, &cb)              // a malformed body is the API's to refuse, wherever it lands
	all, err := c.nodes.ListNodes(r.Context()) // afresh: what the last creates reserved counts
	if err != nil {
		all = nil // the ledger is down: this node answers (and fails) itself
	}
	ranked := cluster.Rank(all, cluster.Request{Template: cb.TemplateID, VCPUs: 1, MemoryMB: 1}, nil)
	if len(ranked) == 0 {
		ranked = []*store.Node{{Name: c.name}}
	}
	tries := min(len(ranked), maxPlacements)
	if snapshot.IsID(cb.TemplateID) {
		// Its files are on its node: asked first; the others start it from the object
		// store's copy when that node is full or gone, or say they cannot.
		tries = len(ranked)
		if sn, err := c.snapshots.GetSnapshot(r.Context(), cb.TemplateID); err == nil {
			if i := slices.IndexFunc(ranked, func(n *store.Node) bool { return n.Name == sn.Node }); i > 0 {
				ranked = append([]*store.Node{ranked[i]}, slices.Delete(slices.Clone(ranked), i, i+1)...)
			}
		}
	}
	if holder := c.volumeHolder(r.Context(), cb.VolumeMounts); holder != "" {
		// Asked first: elsewhere the volume would be published there and fetched here.
		if i := slices.IndexFunc(ranked, func(n *store.Node) bool { return n.Name == holder }); i > 0 {
			ranked = append([]*store.Node{ranked[i]}, slices.Delete(slices.Clone(ranked), i, i+1)...)
		}
	}
	var last *bufferedResponse
	for i, n := range ranked[:tries] {
		rec := &bufferedResponse{header: http.Header{}}
		req := r.Clone(r.Context())
		req.Body, req.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		if n.Name == c.name {
			c.createHere(rec, req, next)
		} else {
			c.forward(rec, req, n)
		}
		last = rec
		if rec.header.Get(HeaderNodeFull) == "" {
			break
		}
		telemetry.Logger(r.Context()).Info("node could not take a create (no room, or not its snapshot), placing it on the next", telemetry.KeyNodeTo, n.Name, telemetry.KeyAttempt, i+1)
	}
	last.header.Del(HeaderNodeFull)
	last.copyTo(w)
}

// volumeHolder is the node holding the live files of the first of a create's volumes one
// node holds; "" when none does. A volume named by its name (the caller's team is not known
// here) counts only when no other team has a volume of that name.
func (c *clusterNode) volumeHolder(ctx context.Context, mounts []cove.VolumeMount) string {
	var all []*store.Volume
	for _, m := range mounts {
		if snapshot.IsVolumeID(m.Name) {
			if v, err := c.volumes.GetVolume(ctx, m.Name); err == nil && v.Node != "" {
				return v.Node
			}
			continue
		}
		if all == nil {
			var err error
			if all, err = c.volumes.ListVolumes(ctx, store.AllNodes, ""); err != nil {
				return ""
			}
		}
		var named []*store.Volume
		for _, v := range all {
			if v.Name == m.Name {
				named = append(named, v)
			}
		}
		if len(named) == 1 && named[0].Node != "" {
			return named[0].Node
		}
	}
	return ""
}

// bufferedResponse holds a create's answer (small JSON) until placement knows it is the one
// to give.
type bufferedResponse struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (b *bufferedResponse) Header() http.Header { return b.header }
func (b *bufferedResponse) WriteHeader(code int) {
	if b.status == 0 {
		b.status = code
	}
}
func (b *bufferedResponse) Write(p []byte) (int, error) {
	if b.status == 0 {
		b.status = http.StatusOK
	}
	return b.body.Write(p)
}

func (b *bufferedResponse) copyTo(w http.ResponseWriter) {
	for k, v := range b.header {
		w.Header()[k] = v
	}
	if b.status == 0 {
		b.status = http.StatusOK
	}
	w.WriteHeader(b.status)
	_, _ = w.Write(b.body.Bytes())
}

// Membership.

// nodeCapacity is what this host offers sandboxes: its CPUs, memory and the data dir's disk.
func nodeCapacity(dataDir string) (vcpus int, memMB, diskMB int64) {
	vcpus = goruntime.NumCPU()
	var si syscall.Sysinfo_t
	if syscall.Sysinfo(&si) == nil {
		memMB = int64(si.Totalram) * int64(si.Unit) >> 20
	}
	var fs syscall.Statfs_t
	if syscall.Statfs(dataDir, &fs) == nil {
		diskMB = int64(fs.Blocks) * fs.Bsize >> 20
	}
	return vcpus, memMB, diskMB
}

// startCluster registers this node, renews its lease, sweeps lost nodes and puts the
// forwarding in front of the handlers built next.
func (s *instance) startCluster(ctx context.Context) error {
	c := s.cfg.Cluster
	if !c.on() {
		return nil
	}
	nodes, ok := s.db.(store.Nodes)
	if !ok {
		return errors.New("--node: the store keeps no cluster ledger (it needs --state postgres://…)")
	}
	secret, err := readClusterSecret(c.SecretFile)
	if err != nil {
		return err
	}
	cn, err := newClusterNode(c.Node, secret, nodes, s.db)
	if err != nil {
		return err
	}
	cn.local = s.orch.HoldsAfterMove
	s.cluster = cn
	vcpus, memMB, diskMB := nodeCapacity(s.cfg.DataDir)
	maxSandboxes := orDefault(c.MaxSandboxes, 200)
	vcpus = orDefault(c.VCPUs, max(8*vcpus, 2*maxSandboxes))
	lease := c.Lease
	if lease <= 0 {
		lease = 10 * time.Second
	}
	m := &cluster.Member{Store: nodes, Interval: lease / 5, LeaseFor: lease, Logger: s.cfg.Logger,
		Node: store.Node{Name: c.Node, AdvertiseURL: c.Advertise, VCPUs: vcpus, MemoryMB: memMB, DiskMB: diskMB,
			MaxSandboxes: maxSandboxes, MaxStarts: orDefault(c.MaxStarts, 8)},
		Templates: s.cachedTemplates,
		OnLost:    func(ctx context.Context, lostAt time.Time) { s.orch.Lost(ctx, lostAt) },
	}
	if err := m.Register(ctx); err != nil {
		return err
	}
	sw := &cluster.Sweeper{Store: nodes, Interval: lease / 5, Logger: s.cfg.Logger,
		OnNodeLost: func(ctx context.Context, n *store.Node, _ []*store.Reservation) {
			if _, err := s.orch.NodeLost(ctx, n.Name, n.HeartbeatAt); err != nil {
				s.cfg.Logger.Error("node lost: its sandboxes not ended", telemetry.KeyNodeOther, n.Name, telemetry.KeyError, err.Error())
			}
		}}
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); m.Run(runCtx) }()
	go func() { defer wg.Done(); sw.Run(runCtx) }()
	go func() { defer wg.Done(); s.drainLoop(runCtx, nodes, lease/5) }()
	s.onClose(func() error { stop(); wg.Wait(); return nil })
	s.say("node %s of a cluster, advertised at %s (%d vCPUs, %d MiB)", c.Node, c.Advertise, vcpus, memMB)
	return nil
}

// cachedTemplates names the templates this node holds, for placement to prefer it.
func (s *instance) cachedTemplates() []string {
	all, err := s.templates.List()
	if err != nil {
		return nil
	}
	names := make([]string, 0, len(all))
	for _, t := range all {
		names = append(names, t.Name)
	}
	return names
}

func orDefault(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

// placement is the cluster's ledger a node's creates reserve in; nil on a lone server.
func placement(cfg Config, db store.DB) orchestrator.Placement {
	if !cfg.Cluster.on() {
		return nil
	}
	if nodes, ok := db.(store.Nodes); ok {
		return nodes
	}
	return nil
}

// redactObjects is an --objects address fit for a log: without a query's secrets (an S3
// address carries none; credentials come from the environment), only scheme, bucket and
// endpoint.
func redactObjects(addr string) string {
	u, err := url.Parse(addr)
	if err != nil {
		return "(unreadable address)"
	}
	u.User = nil
	return u.String()
}

// adminRoutes are the operator's routes behind the admin token: the retention status, and a
// cluster node's view of the nodes (list, drain, activate).
func (s *instance) adminRoutes() []httpx.Route {
	cfg := adminroutes.Config{Status: s.retainer.Status}
	if nodes, ok := s.db.(store.Nodes); ok && s.cluster != nil {
		cfg.Nodes = nodes
	}
	return adminroutes.Routes(cfg)
}

// checkpointMover carries snapshot-paused sandboxes between nodes through the object store
// (orchestrator.Mover): blob sandboxes/<id>/checkpoint.tar.
type checkpointMover struct {
	blobs blob.Store
	nodes store.Nodes
}

// checkpointBlob is where a sandbox's checkpoint (or a snapshot's files) is kept in the object
// store.
func checkpointBlob(id string) string {
	if snapshot.IsID(id) {
		return "snapshots/" + id + "/files.tar"
	}
	return "sandboxes/" + id + "/checkpoint.tar"
}

func (m checkpointMover) Upload(ctx context.Context, id, dir string) error {
	return blob.PutTree(ctx, m.blobs, checkpointBlob(id), dir, "")
}

func (m checkpointMover) Download(ctx context.Context, id, parent string) (string, error) {
	if err := blob.GetTree(ctx, m.blobs, checkpointBlob(id), parent, "checkpoint"); err != nil {
		if errors.Is(err, blob.ErrNotFound) {
			return "", fmt.Errorf("%w: no checkpoint of %s in the object store", orchestrator.ErrNotFound, id)
		}
		return "", err
	}
	return filepath.Join(parent, "checkpoint"), nil
}

func (m checkpointMover) Forget(ctx context.Context, id string) {
	_ = m.blobs.Delete(ctx, checkpointBlob(id)) // what is left costs space, never a wrong resume
}

func (m checkpointMover) NodeAlive(ctx context.Context, node string) bool {
	n, err := m.nodes.GetNode(ctx, node)
	if err != nil {
		return false
	}
	return n.State.Holds() && time.Now().Before(n.LeaseUntil)
}

// mover is the orchestrator's Mover: a cluster node with an object store; nil otherwise.
func (s *instance) mover() orchestrator.Mover {
	nodes, ok := s.db.(store.Nodes)
	if !ok || !s.cfg.Cluster.on() || s.objects == nil {
		return nil
	}
	return checkpointMover{blobs: s.objects, nodes: nodes}
}

// Drain with live migration. A node an operator drains (cove node drain, the node's state
// draining) takes no creates (placement ranks active nodes only) and moves each of its
// running sandboxes to the best other node: Migrate checkpoints it to the object store and
// hands its record over, and the other node adopts it through POST
// /cluster/sandboxes/{id}/adopt, a route only a node's signature opens.

// adoptPath is the route a node asks another to take a handed sandbox over by.
func adoptPath(id string) string { return "/cluster/sandboxes/" + url.PathEscape(id) + "/adopt" }

// internalEdge serves the routes between nodes through the one chain, where a node's
// signature authenticates (httpx.AuthNode).
func (s *instance) internalEdge() http.Handler {
	chain := httpx.Chain{Edge: "cluster", Logger: s.cfg.Logger, Authenticate: func(r *http.Request, _ httpx.Auth) (context.Context, error) {
		ok, err := s.cluster.forwarded(r)
		if err == nil && !ok {
			err = fmt.Errorf("%w: %s is for the cluster's nodes: a node's signature (%s) is missing", errdefs.ErrUnauthenticated, r.URL.Path, HeaderNodeForward)
		}
		return r.Context(), err
	}}
	return chain.Routes([]httpx.Route{
		{Pattern: "POST /cluster/sandboxes/{id}/adopt", Auth: httpx.AuthNode, Handler: s.adopt},
		{Pattern: "POST /cluster/volumes/{id}/release", Auth: httpx.AuthNode, Handler: s.releaseVolume},
		// Anything else under /cluster/ is no route, for a node as for anyone.
		{Pattern: "/cluster/", Auth: httpx.AuthNode, Handler: func(w http.ResponseWriter, r *http.Request) error {
			return fmt.Errorf("%w: %s %s", errdefs.ErrNotFound, r.Method, r.URL.Path)
		}},
	})
}

// adopt takes over a sandbox another node handed over (a drain's move).
func (s *instance) adopt(w http.ResponseWriter, r *http.Request) error {
	sb, err := s.orch.Adopt(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	httpx.WriteJSON(w, http.StatusOK, map[string]string{"sandboxID": sb.ID, "node": sb.Node})
	return nil
}

// releaseVolume lets go of a volume this node holds, for another node to take (a create, a
// snapshot start or the content API there): published to the object store, or a 409 naming
// the sandbox that mounts it.
func (s *instance) releaseVolume(w http.ResponseWriter, r *http.Request) error {
	if err := s.volumes.ReleaseVolume(r.Context(), r.PathValue("id")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// askAdopt asks node n to take sandbox id over, signed as this node.
func (c *clusterNode) askAdopt(ctx context.Context, n *store.Node, id string) error {
	return c.ask(ctx, n, adoptPath(id))
}

// ask posts to node n's internal route path, signed as this node: errAdoptRefused (with its
// answer) when n answers other than 2xx.
func (c *clusterNode) ask(ctx context.Context, n *store.Node, path string) error {
	u, err := url.Parse(n.AdvertiseURL)
	if err != nil {
		return err
	}
	u.Path = path
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), nil)
	if err != nil {
		return err
	}
	reqID := telemetry.RequestID(ctx)
	if reqID != "" {
		req.Header.Set(requestid.Header, reqID)
	}
	req.Header.Set(HeaderNodeForward, c.sign(req.Method, req.Host, req.URL.RequestURI(), reqID, time.Now()))
	res, err := c.fwd.Transport.RoundTrip(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode/100 != 2 {
		body, _ := io.ReadAll(io.LimitReader(res.Body, 4096))
		return &refusal{node: n.Name, status: res.Status, code: res.StatusCode, body: strings.TrimSpace(string(body))}
	}
	return nil
}

// refusal is another node's answer other than 2xx to an internal route: errAdoptRefused.
type refusal struct {
	node, status, body string
	code               int
}

func (r *refusal) Error() string {
	return fmt.Sprintf("%v: node %s answered %s: %s", errAdoptRefused, r.node, r.status, r.body)
}

func (r *refusal) Is(target error) bool { return target == errAdoptRefused }

// volumePeers are the other nodes, for this node's volumes (snapshot.VolumePeers).
type volumePeers struct {
	s     *instance
	nodes store.Nodes
}

func (p volumePeers) NodeAlive(ctx context.Context, node string) bool {
	return checkpointMover{nodes: p.nodes}.NodeAlive(ctx, node)
}

// Release asks node to publish volume id and let go of it: a 409 from it (a sandbox there
// mounts the volume) is snapshot.ErrVolumeInUse with its words.
func (p volumePeers) Release(ctx context.Context, node, id string) error {
	if p.s.cluster == nil {
		return fmt.Errorf("%w: this node has not joined its cluster yet", errdefs.ErrUnavailable)
	}
	n, err := p.nodes.GetNode(ctx, node)
	if err != nil {
		return err
	}
	// Bounded: the asking node holds the volume's lock meanwhile (a publish of a large image
	// takes seconds, never minutes).
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := p.s.cluster.ask(ctx, n, "/cluster/volumes/"+url.PathEscape(id)+"/release"); err != nil {
		if r, ok := err.(*refusal); ok && r.code == http.StatusConflict {
			return fmt.Errorf("%w: %v", snapshot.ErrVolumeInUse, err)
		}
		return err
	}
	return nil
}

// shareVolumes makes this node's volumes move between the cluster's nodes through the
// object store; a lone server's stay where they are.
func (s *instance) shareVolumes(ctx context.Context, v *snapshot.Volumes) {
	nodes, ok := s.db.(store.Nodes)
	if !ok || !s.cfg.Cluster.on() || s.objects == nil {
		return
	}
	v.Share(ctx, s.objects, volumePeers{s: s, nodes: nodes})
}

// errAdoptRefused: the node asked to adopt a sandbox answered no; a drain tries the next.
var errAdoptRefused = errors.New("adoption refused")

// drainLoop moves this node's running sandboxes away while an operator drains it.
func (s *instance) drainLoop(ctx context.Context, nodes store.Nodes, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		self, err := nodes.GetNode(ctx, s.cfg.Cluster.Node)
		if err != nil || self.State != store.NodeDraining {
			continue
		}
		for _, sb := range s.orch.Running() {
			if ctx.Err() != nil {
				return
			}
			s.moveAway(ctx, nodes, sb)
		}
	}
}

// moveAway migrates one sandbox to the best other node, trying the next on a failure.
func (s *instance) moveAway(ctx context.Context, nodes store.Nodes, sb *store.Sandbox) {
	ctx = telemetry.WithRequestID(ctx, "drain-"+sb.ID)
	log := s.cfg.Logger.With(telemetry.KeySandboxID, sb.ID)
	all, err := nodes.ListNodes(ctx)
	if err != nil {
		log.Warn("drain: no node list", telemetry.KeyError, err.Error())
		return
	}
	for _, n := range cluster.Rank(all, cluster.Request{Template: sb.TemplateID, VCPUs: sb.CPUCount, MemoryMB: int64(sb.MemoryMB)}, nil) {
		if n.Name == s.cfg.Cluster.Node {
			continue
		}
		err := s.orch.Migrate(ctx, sb.ID, n.Name, func(ctx context.Context) error { return s.cluster.askAdopt(ctx, n, sb.ID) })
		if err == nil {
			return
		}
		log.Warn("drain: sandbox not moved", telemetry.KeyError, err.Error())
		if !errors.Is(err, errdefs.ErrUnavailable) && !errors.Is(err, errAdoptRefused) {
			return // not the target's fault: the next round tries again
		}
	}
}
