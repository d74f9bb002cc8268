// Package network gives sandboxes a way out: a network namespace with a veth to the host, an
// address from a pool, a default route, DNS through the resolver internal/sandbox/egress runs, and
// NAT, with each sandbox's egress policy (an egress.Policy) enforced on the host where the
// sandbox cannot touch it: by the packet filter here, and by egress's resolver and proxies,
// which the table redirects the sandbox's DNS and proxied TCP to.
//
// The one idea: every rule lives in ONE nftables table the server owns (`inet cove` by
// default). The server builds it from scratch at start and deletes it at shutdown; each
// sandbox adds one chain (sb_N, rendered from egress's Steps) and one entry mapping its link
// to that chain, and an update replaces that chain in one nft transaction, so a policy is
// never half applied.
package network

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/sandbox/egress"
	"github.com/cove-dev/cove/internal/sandbox/runtime"
	"github.com/cove-dev/cove/internal/store"
)

// Errors callers branch on.
var (
	// ErrNotAttached: the sandbox has no network of this manager's.
	ErrNotAttached = errors.New("sandbox has no network")
	// ErrExhausted: every address of the pool is in use.
	ErrExhausted = errors.New("address pool exhausted")
)

// Config configures a Manager. Zero fields take the defaults shown.
type Config struct {
	// Pool is where sandbox addresses come from, a /30 per sandbox; 10.201.0.0/16 by default
	// (16384 sandboxes). It must not overlap a network the host is on or another server's pool.
	Pool netip.Prefix
	// Table names the nftables table (family inet) the server owns; "cove" by default.
	Table string
	// LinkPrefix starts the name of each sandbox's host-side veth (<prefix>-<index>); 1 to 6
	// of [a-z0-9]; "cove" by default. Two servers on one host need different ones.
	LinkPrefix string
	// DNS are the upstream resolvers Cove's resolver forwards sandbox queries to. Nil reads
	// the host's /etc/resolv.conf; an empty, non-nil slice forwards nowhere (REFUSED).
	DNS []netip.AddrPort
	// EgressLimit, when set, is all a sandbox may ever reach, whatever its policy
	// (tests: 198.18.0.0/15, so nothing leaves the machine).
	EgressLimit []netip.Prefix
	// IPForward turns on net.ipv4.ip_forward at start, which routing sandbox traffic out of
	// the host's uplink needs. Without it only the sandboxes' own links forward (tests).
	IPForward bool
	// Warm is how many namespaces with their veth are kept ready (4 by default; -1: none).
	Warm int
	// StateDir holds the pinned namespaces; /run/cove/net/<table>.
	StateDir string
	// FilesDir holds the files bound into sandboxes (resolv.conf, CA bundles): a tmpfs, so a
	// sandbox's mountinfo names no path of the host's; /dev/shm/cove-net-<table> by default,
	// StateDir where /dev/shm is no tmpfs.
	FilesDir string
	// Records keeps each sandbox's allocation (Allocation), so that a restarted server
	// re-claims it; nil keeps none. The store seals the policy (an egress proxy's password).
	Records store.NetworkRecords
	// Node is the cluster node whose records these are ("" on a server of one box): a
	// manager reads, reclaims and drops its own node's records only.
	Node string
	// Keeper keeps the interception CA's key (derived from it, never written); nil makes a
	// CA of this start only (tests).
	Keeper egress.Keeper
	// RecordDir is where an older release kept its interception CA (sealed there now);
	// <StateDir>/records by default. Allocation
	// records an older release wrote there (<id>.json) are moved into Records at start.
	RecordDir string
	// NFT is the nft binary; "nft" in PATH by default.
	NFT    string
	Logger *slog.Logger
	// LogGroup is the netlink log group refused packets are sampled to (nflog); derived from
	// Table when 0. Two servers on one host need different ones.
	LogGroup uint16
	// ForbidPrivateProxies refuses egress proxies at private, loopback or link-local
	// addresses (an operator's choice: such a proxy reaches inside the operator's network).
	ForbidPrivateProxies bool
	// UpstreamCAs (PEM) are trusted, beside the host's roots, for the servers HTTPS requests
	// with header transforms are re-encrypted to (tests: the fake internet's CA).
	UpstreamCAs []byte
	// SecretValue resolves a ${e2b.secrets.NAME} placeholder of a team's header rule, at
	// egress, on the host; nil resolves none.
	SecretValue func(team, name string) (string, bool)
	// OnDenied receives samples of the connections the rules refused (network.denied).
	OnDenied func(ctx context.Context, d egress.Denied)
}

// DefaultPool is the address pool of a server that names none.
var DefaultPool = netip.MustParsePrefix("10.201.0.0/16")

var validPrefix = regexp.MustCompile(`^[a-z0-9]{1,6}$`)
var validTable = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]{0,31}$`)

// Manager gives sandboxes their network. Safe for concurrent use.
type Manager struct {
	cfg Config
	// gen names this manager's namespaces and resolv.conf files apart from an earlier
	// server's: a checkpoint that names an earlier server's namespace (swept at start) must
	// fail to restore, never join a namespace this server gave another sandbox.
	gen string
	// egress runs the resolver and the proxies the table redirects to, knows each attached
	// sandbox's policy by its address, and reports what the rules refused.
	egress *egress.Enforcer

	// pmu serialises the writes of sandboxes' rules, which read and set their slot's mark.
	pmu sync.Mutex
	// marks hands out connection marks (see sandboxScript); it starts at a random value so
	// that connections an earlier server marked are not taken for this one's.
	marks atomic.Uint32

	mu       sync.Mutex
	used     map[int]bool      // slot indexes in use or warming
	next     int               // where the search for a free index starts (delays reuse)
	attached map[string]*held  // by sandbox id
	claims   map[string]*claim // recorded by an earlier server, not re-claimed yet, by sandbox id
	warm     chan *slot
	stop     chan struct{}
	wg       sync.WaitGroup
	closed   bool
}

// held is an attached sandbox's network. Its policy is also m.egress's (Add, SetPolicy).
type held struct {
	id     string
	slot   *slot
	policy egress.Policy
	// inbound is recorded with the allocation for the orchestrator (SetInbound).
	inbound Inbound
}

// Attachment is what the runtime needs to put a sandbox on its network.
type Attachment struct {
	Netns      string     // the pinned namespace the sandbox joins (runtime.Spec.Netns)
	ResolvConf string     // a file to bind-mount read-only on the sandbox's /etc/resolv.conf
	Addr       netip.Addr // the sandbox's address
	Gateway    netip.Addr // its gateway and resolver, on the host
}

// New checks the host, removes what a previous server of this configuration left, builds
// the table afresh and starts the resolver and the pool of ready namespaces.
func New(ctx context.Context, cfg Config) (*Manager, error) {
	if !cfg.Pool.IsValid() {
		cfg.Pool = DefaultPool
	}
	cfg.Pool = cfg.Pool.Masked()
	if !cfg.Pool.Addr().Is4() || cfg.Pool.Bits() > 30 {
		return nil, fmt.Errorf("network: address pool %s must be an IPv4 prefix of /30 or larger", cfg.Pool)
	}
	if cfg.Table == "" {
		cfg.Table = "cove"
	}
	if !validTable.MatchString(cfg.Table) {
		return nil, fmt.Errorf("network: table name %q must be a letter then up to 31 of [A-Za-z0-9_]", cfg.Table)
	}
	if cfg.LinkPrefix == "" {
		cfg.LinkPrefix = "cove"
	}
	if !validPrefix.MatchString(cfg.LinkPrefix) {
		return nil, fmt.Errorf("network: link prefix %q must be 1 to 6 of [a-z0-9]", cfg.LinkPrefix)
	}
	if cfg.Warm == 0 {
		cfg.Warm = 4
	}
	if cfg.StateDir == "" {
		cfg.StateDir = "/run/cove/net/" + cfg.Table
	}
	if cfg.RecordDir == "" {
		cfg.RecordDir = filepath.Join(cfg.StateDir, "records")
	}
	if cfg.FilesDir == "" {
		cfg.FilesDir = cfg.StateDir
		if runtime.OnTmpfs(runtime.ShmDir) != "" {
			cfg.FilesDir = filepath.Join(runtime.ShmDir, "cove-net-"+cfg.Table)
		}
	}
	if cfg.NFT == "" {
		cfg.NFT = "nft"
	}
	if cfg.LogGroup == 0 {
		f := fnv.New32a()
		f.Write([]byte(cfg.Table))
		cfg.LogGroup = uint16(1000 + f.Sum32()%60000)
	}
	if cfg.Logger == nil {
		cfg.Logger = telemetry.Logger(ctx)
	}
	nft, err := exec.LookPath(cfg.NFT)
	if err != nil {
		return nil, fmt.Errorf("network: the nft binary (Debian package nftables) is needed for sandbox egress: %w", err)
	}
	cfg.NFT = nft
	if cfg.DNS == nil {
		conf, err := os.ReadFile("/etc/resolv.conf")
		if err != nil {
			return nil, fmt.Errorf("network: read the host's resolvers: %w", err)
		}
		cfg.DNS = egress.HostResolvers(conf)
	}
	for _, dir := range []string{cfg.StateDir, cfg.RecordDir, cfg.FilesDir} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("network: %w", err)
		}
	}
	m := &Manager{cfg: cfg, gen: newGen(), used: map[int]bool{}, attached: map[string]*held{}, stop: make(chan struct{})}
	var seed [4]byte
	_, _ = rand.Read(seed[:])
	m.marks.Store(binary.BigEndian.Uint32(seed[:]))
	if m.claims, err = m.loadClaims(ctx); err != nil {
		return nil, fmt.Errorf("network: %w", err)
	}
	for _, c := range m.claims {
		m.used[c.slot.index] = true
	}
	if err := m.sweep(); err != nil {
		return nil, fmt.Errorf("network: remove leftovers: %w", err)
	}
	if err := m.checkPoolFree(); err != nil {
		return nil, fmt.Errorf("network: %w", err)
	}
	if cfg.IPForward {
		if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0); err != nil {
			return nil, fmt.Errorf("network: turn on ip_forward: %w", err)
		}
	}
	m.egress, err = egress.New(ctx, egress.Config{DNS: cfg.DNS, EgressLimit: cfg.EgressLimit, Pool: cfg.Pool, LogGroup: cfg.LogGroup,
		CADir: cfg.RecordDir, Keeper: cfg.Keeper, UpstreamCAs: cfg.UpstreamCAs, SecretValue: cfg.SecretValue, OnDenied: cfg.OnDenied,
		OnLearned: m.allowLearned, Logger: cfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("network: %w", err)
	}
	if err := m.nft(ctx, m.tableScript()); err != nil {
		m.egress.Close()
		return nil, fmt.Errorf("network: build table %s: %w", cfg.Table, err)
	}
	if cfg.Warm > 0 {
		m.warm = make(chan *slot, cfg.Warm)
		m.wg.Add(1)
		go m.fill()
	}
	cfg.Logger.Info("network ready", telemetry.KeyNetworkPool, cfg.Pool.String(), telemetry.KeyNetworkTable, cfg.Table,
		telemetry.KeyNetworkDNSUpstreams, len(cfg.DNS), telemetry.KeyNetworkEgressLimit, join(cfg.EgressLimit), telemetry.KeyNetworkWarm, cfg.Warm)
	return m, nil
}

// Pool is the manager's address pool.
func (m *Manager) Pool() netip.Prefix { return m.cfg.Pool }

// Table is the name of the nftables table (family inet) the manager owns.
func (m *Manager) Table() string { return m.cfg.Table }

// fill keeps the pool of ready slots full.
func (m *Manager) fill() {
	defer m.wg.Done()
	for {
		s, err := m.newSlot()
		if err == nil {
			if err = m.applyPolicy(context.Background(), s, egress.OpenPolicy, false); err != nil {
				err = errors.Join(err, m.release(s))
			}
			s.ruled = err == nil
		}
		if err != nil {
			m.cfg.Logger.Warn("network: warm namespace failed", telemetry.KeyError, err.Error())
			select {
			case <-m.stop:
				return
			case <-time.After(time.Second):
			}
			continue
		}
		select {
		case m.warm <- s:
		case <-m.stop:
			_ = m.dropSlot(context.Background(), s)
			return
		}
	}
}

// newSlot reserves a free index and builds its slot.
func (m *Manager) newSlot() (*slot, error) {
	m.mu.Lock()
	n := 1 << (32 - m.cfg.Pool.Bits()) / blockSize
	index := -1
	for i := range n {
		if j := (m.next + i) % n; !m.used[j] {
			index = j
			break
		}
	}
	if index < 0 {
		m.mu.Unlock()
		return nil, fmt.Errorf("%w: %s holds %d sandboxes", ErrExhausted, m.cfg.Pool, n)
	}
	m.used[index], m.next = true, index+1
	m.mu.Unlock()
	s, err := m.makeSlot(index)
	if err != nil {
		m.mu.Lock()
		delete(m.used, index)
		m.mu.Unlock()
		return nil, err
	}
	return s, nil
}

// release removes slot s and frees its index.
func (m *Manager) release(s *slot) error {
	err := m.removeSlot(s)
	m.mu.Lock()
	delete(m.used, s.index)
	m.mu.Unlock()
	return err
}

// Attach gives sandbox id a network under policy p: a ready namespace when one is waiting,
// else a new one.
func (m *Manager) Attach(ctx context.Context, id string, p egress.Policy) (*Attachment, error) {
	if err := m.checkProxy(p); err != nil {
		return nil, err
	}
	var s *slot
	select {
	case s = <-m.warm:
	default:
		var err error
		if s, err = m.newSlot(); err != nil {
			return nil, fmt.Errorf("network for %s: %w", id, err)
		}
	}
	if !s.ruled || !p.IsOpen() {
		if err := m.applyPolicy(ctx, s, p, s.ruled); err != nil {
			return nil, errors.Join(fmt.Errorf("network rules for %s: %w", id, err), m.dropSlot(ctx, s))
		}
		s.ruled = true
	}
	if err := m.record(id, s, p, Inbound{}); err != nil {
		return nil, errors.Join(err, m.dropSlot(ctx, s))
	}
	m.mu.Lock()
	m.attached[id] = &held{id: id, slot: s, policy: p}
	m.mu.Unlock()
	m.egress.Add(id, s.addr, s.host, p)
	return &Attachment{Netns: s.netns, ResolvConf: s.resolv, Addr: s.addr, Gateway: s.host}, nil
}

// Update replaces sandbox id's policy, atomically.
func (m *Manager) Update(ctx context.Context, id string, p egress.Policy) error {
	m.mu.Lock()
	h := m.attached[id]
	m.mu.Unlock()
	if h == nil {
		return fmt.Errorf("%w: %s", ErrNotAttached, id)
	}
	if err := m.checkProxy(p); err != nil {
		return err
	}
	m.mu.Lock()
	old, in := h.policy, h.inbound
	m.mu.Unlock()
	// The record first: a crash after the rules changed must not bring the old ones back.
	if err := m.record(id, h.slot, p, in); err != nil {
		return err
	}
	if m.sameRules(h.slot, old, p) {
		// Nothing the packet filter holds changes (a warm pool's sandbox claimed under the
		// rules it was started with, or only the team changes): no nft run.
		m.mu.Lock()
		h.policy = p
		m.mu.Unlock()
		m.egress.SetPolicy(h.slot.addr, p, false)
		return nil
	}
	if err := m.applyPolicy(ctx, h.slot, p, true); err != nil {
		return errors.Join(fmt.Errorf("network rules for %s: %w", id, err), m.record(id, h.slot, old, in))
	}
	m.mu.Lock()
	h.policy = p
	m.mu.Unlock()
	m.egress.SetPolicy(h.slot.addr, p, true) // the table's set of answered addresses starts afresh
	return nil
}

// sameRules reports whether slot s's packet filter rules under policy a are those under b.
func (m *Manager) sameRules(s *slot, a, b egress.Policy) bool {
	m.pmu.Lock()
	defer m.pmu.Unlock()
	return m.sandboxScript(s, a, true, 1) == m.sandboxScript(s, b, true, 1)
}

// Policy is sandbox id's policy now.
func (m *Manager) Policy(id string) (egress.Policy, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if h := m.attached[id]; h != nil {
		return h.policy, true
	}
	return egress.Policy{}, false
}

// Detach removes sandbox id's network; call it after the sandbox's processes are gone.
// Detaching a sandbox without one is not an error.
func (m *Manager) Detach(ctx context.Context, id string) error {
	m.mu.Lock()
	h := m.attached[id]
	delete(m.attached, id)
	m.mu.Unlock()
	if h != nil {
		m.egress.Remove(h.slot.addr)
	}
	if h == nil {
		if _, err := m.dropClaim(id); err != nil {
			return fmt.Errorf("network of %s: %w", id, err)
		}
		return nil
	}
	m.unrecord(id)
	m.removeTrustBundle(id)
	if err := m.dropSlot(ctx, h.slot); err != nil {
		return fmt.Errorf("network of %s: %w", id, err)
	}
	return nil
}

// applyPolicy writes slot s's rules for p with a new mark (see sandboxScript), and keeps the
// mark once the table has it.
func (m *Manager) applyPolicy(ctx context.Context, s *slot, p egress.Policy, existed bool) error {
	m.pmu.Lock()
	defer m.pmu.Unlock()
	mark := m.marks.Add(1)
	if mark == 0 { // 0 is "no mark", which every connection starts with
		mark = m.marks.Add(1)
	}
	if err := m.nft(ctx, m.sandboxScript(s, p, existed, mark)); err != nil {
		return err
	}
	s.mark = mark
	return nil
}

// dropSlot removes slot s's rules, if it has them, and the slot.
func (m *Manager) dropSlot(ctx context.Context, s *slot) error {
	var err error
	if s.ruled {
		m.pmu.Lock()
		err = m.nft(context.WithoutCancel(ctx), m.dropSandboxScript(s))
		m.pmu.Unlock()
	}
	return errors.Join(err, m.release(s))
}

// Close removes the ready namespaces, the table and the resolver. The slots of sandboxes
// still attached stay, recorded, for the next server to re-claim (a server that stops and
// keeps its sandboxes running); they have no egress until it does. Detach a sandbox to
// remove its slot.
func (m *Manager) Close(ctx context.Context) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	m.mu.Unlock()
	close(m.stop)
	m.wg.Wait()
	var errs []error
	if m.warm != nil {
	drain:
		for {
			select {
			case s := <-m.warm:
				errs = append(errs, m.dropSlot(ctx, s))
			default:
				break drain
			}
		}
	}
	t := m.cfg.Table
	errs = append(errs, m.nft(context.WithoutCancel(ctx), fmt.Sprintf("table inet %s\ndelete table inet %s\n", t, t)))
	m.egress.Close()
	_ = os.Remove(m.cfg.FilesDir)
	_ = os.Remove(m.cfg.StateDir)
	return errors.Join(errs...)
}

// allowLearned adds to sandbox id's set (hosts_N) the addresses the resolver answered it for
// its allowed hostnames, each for its TTL (egress's OnLearned).
func (m *Manager) allowLearned(id string, learned []egress.Learned) {
	m.mu.Lock()
	h := m.attached[id]
	m.mu.Unlock()
	if h == nil {
		return
	}
	elems := make([]string, 0, len(learned))
	for _, l := range learned {
		elems = append(elems, fmt.Sprintf("%s timeout %ds", l.Addr, int(l.TTL.Seconds())))
	}
	script := fmt.Sprintf("add element inet %s %s { %s }\n", m.cfg.Table, h.slot.set(), strings.Join(elems, ", "))
	if err := m.nft(context.Background(), script); err != nil {
		m.cfg.Logger.Debug("network: allow answered addresses", telemetry.KeyError, err.Error())
	}
}

// checkProxy applies the operator's rule on proxy addresses.
func (m *Manager) checkProxy(p egress.Policy) error {
	return egress.CheckProxy(p, m.cfg.ForbidPrivateProxies)
}

// SetIdentityTokens sets what resolves the ${e2b.identity.tokens.<name>} placeholders of
// header rules, at egress, as secrets are; nil (the default) refuses every request whose
// rule names one. Safe to call while sandboxes run.
func (m *Manager) SetIdentityTokens(t egress.IdentityTokens) { m.egress.SetIdentityTokens(t) }

// CAPEM is the Cove CA certificate sandboxes trust.
func (m *Manager) CAPEM() []byte { return m.egress.CAPEM() }

// FlushDenied hands the samples of id not yet reported to the OnDenied callback now, in
// the caller's goroutine: one about to Detach a network that lived shorter than a flush (a
// build step) reports what its rules refused first. The caller must hold no lock OnDenied
// takes.
func (m *Manager) FlushDenied(ctx context.Context, id string) { m.egress.FlushDenied(ctx, id) }

// TrustBundle writes the sandbox's CA bundle: the template's (templateBundle, may be nil)
// with Cove's CA added, to bind-mount over /etc/ssl/certs/ca-certificates.crt.
func (m *Manager) TrustBundle(id string, templateBundle []byte) (string, error) {
	path := filepath.Join(m.cfg.FilesDir, "ca-"+id+".crt")
	b := append(append(bytes.TrimRight(templateBundle, "\n"), '\n'), m.egress.CAPEM()...)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return "", fmt.Errorf("trust bundle: %w", err)
	}
	return path, nil
}

// removeTrustBundle removes what TrustBundle wrote for id.
func (m *Manager) removeTrustBundle(id string) {
	_ = os.Remove(filepath.Join(m.cfg.FilesDir, "ca-"+id+".crt"))
}

// newGen is a short random name for one manager's lifetime.
func newGen() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
