// Package egress decides what a sandbox may reach, and enforces it where Cove's own code
// carries the sandbox's traffic: the policy model (E2B's allowInternetAccess, allowOut,
// denyOut, egressProxy and network rules), the verdicts, the DNS resolver every sandbox
// query goes to, the proxies its TCP is redirected to (a SOCKS5 egress proxy, the header
// rules' interceptor) and the reports of what the rules refused.
//
// The one idea: a policy is one ordered list of steps (Steps) that both enforcers read:
// the host's packet filter, which internal/sandbox/network renders from them as the sandbox's
// nftables chain, and the Enforcer's proxies, which dial from the host and so pass no
// forward chain. Whatever the table refuses, they refuse. The Enforcer knows a sandbox by
// its address only, as the network registers it (Add, SetPolicy, Remove): namespaces, links
// and the table are internal/sandbox/network's, which imports this package and never the reverse.
package egress

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/cove-dev/cove/internal/observe/telemetry"
)

// Config configures an Enforcer.
type Config struct {
	// DNS are the upstream resolvers sandbox queries are forwarded to; none: every query is
	// answered REFUSED.
	DNS []netip.AddrPort
	// EgressLimit, when set, is all a sandbox may ever reach, whatever its policy.
	EgressLimit []netip.Prefix
	// Pool holds every sandbox's address: no sandbox reaches another.
	Pool netip.Prefix
	// LogGroup is the netlink log group the table samples refused packets to (nflog).
	LogGroup uint16
	// CADir keeps the interception CA's certificate (ca.pem), and an older release's CA key
	// (sealed there now), so that the sandboxes a restarted server adopts still trust it.
	CADir string
	// Keeper keeps the interception CA's key (derived from it, never written); nil makes a
	// CA of this start only (tests).
	Keeper Keeper
	// UpstreamCAs (PEM) are trusted, beside the host's roots, for the servers HTTPS requests
	// with header transforms are re-encrypted to.
	UpstreamCAs []byte
	// SecretValue resolves a ${e2b.secrets.NAME} placeholder of a team's header rule; nil
	// resolves none.
	SecretValue func(team, name string) (string, bool)
	// OnDenied receives samples of the connections the rules refused (network.denied).
	OnDenied func(ctx context.Context, d Denied)
	// OnLearned receives the addresses the resolver answered sandbox id for its allowed
	// hostnames, before the sandbox sees the answer: the table must let them through too.
	OnLearned func(id string, learned []Learned)
	Logger    *slog.Logger
}

// Learned is an address the resolver answered a sandbox for one of its allowed hostnames,
// allowed for TTL.
type Learned struct {
	Addr netip.Addr
	TTL  time.Duration
}

// Enforcer runs the resolver and the proxies sandboxes' traffic is redirected to, and
// reports what the rules refused. Safe for concurrent use.
type Enforcer struct {
	cfg      Config
	resolver *resolver
	proxy    *transparent // where sandboxes' TCP goes when they have an egress proxy or transforms
	ca       *ca          // signs what the intercepting proxy shows sandboxes
	// upstreamRoots verify the servers the intercepting proxy re-encrypts to.
	upstreamRoots *x509.CertPool
	// identity resolves header rules' identity token placeholders (SetIdentityTokens).
	identity atomic.Pointer[identitySource]

	dmu    sync.Mutex // guards window
	window map[deniedKey]*Denied

	mu     sync.Mutex
	byAddr map[netip.Addr]*sandbox
	stop   chan struct{}
	wg     sync.WaitGroup
}

// learnedAddr is an address the resolver answered a sandbox for an allowed name.
type learnedAddr struct {
	name  string
	until time.Time
}

// sandbox is one sandbox as the enforcer knows it.
type sandbox struct {
	id      string
	addr    netip.Addr // its one address (the table drops packets from any other)
	gateway netip.Addr // the host's end of its link, where its DNS goes
	policy  Policy     // guarded by Enforcer.mu
	// learned mirrors the addresses the resolver allowed (the table's set), with the name
	// they were answered for and their expiry, for the egress proxy. Guarded by Enforcer.mu.
	learned map[netip.Addr]learnedAddr
}

// New starts the resolver, the proxies and the reading of refused packets.
func New(ctx context.Context, cfg Config) (*Enforcer, error) {
	if cfg.Logger == nil {
		cfg.Logger = telemetry.Logger(ctx)
	}
	e := &Enforcer{cfg: cfg, window: map[deniedKey]*Denied{}, byAddr: map[netip.Addr]*sandbox{}, stop: make(chan struct{})}
	var err error
	if e.ca, err = loadCA(cfg.CADir, cfg.Keeper); err != nil {
		return nil, fmt.Errorf("CA: %w", err)
	}
	if e.upstreamRoots, err = x509.SystemCertPool(); err != nil || e.upstreamRoots == nil {
		e.upstreamRoots = x509.NewCertPool()
	}
	if len(cfg.UpstreamCAs) > 0 && !e.upstreamRoots.AppendCertsFromPEM(cfg.UpstreamCAs) {
		return nil, errors.New("no certificate in the upstream CAs")
	}
	if e.resolver, err = listenResolver(cfg.DNS, cfg.Logger, e.learn, e.permitQuery); err != nil {
		return nil, err
	}
	if e.proxy, err = e.listenTransparent(); err != nil {
		e.resolver.close()
		return nil, err
	}
	logs, err := openNFLog(cfg.LogGroup)
	if err != nil {
		e.resolver.close()
		e.proxy.close()
		return nil, err
	}
	e.wg.Add(1)
	go e.collectDenied(context.WithoutCancel(ctx), logs)
	return e, nil
}

// DNSPort is the port of the resolver (UDP and TCP, every host address) the table
// redirects sandboxes' DNS to.
func (e *Enforcer) DNSPort() int { return e.resolver.port() }

// ProxyPort is the port (TCP, every host address) the table redirects the connections of
// sandboxes with an egress proxy or header rules to.
func (e *Enforcer) ProxyPort() int { return e.proxy.port() }

// Close stops the resolver, the proxies and the reports.
func (e *Enforcer) Close() {
	close(e.stop)
	e.wg.Wait()
	e.resolver.close()
	e.proxy.close()
}

// Add makes the sandbox id at addr, whose gateway is gateway, known under policy p.
func (e *Enforcer) Add(id string, addr, gateway netip.Addr, p Policy) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.byAddr[addr] = &sandbox{id: id, addr: addr, gateway: gateway, policy: p, learned: map[netip.Addr]learnedAddr{}}
}

// SetPolicy replaces the policy of the sandbox at addr. fresh says the table's set of
// answered addresses started afresh with it (new rules were written): the addresses
// learned under the old policy are forgotten here too.
func (e *Enforcer) SetPolicy(addr netip.Addr, p Policy, fresh bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if s := e.byAddr[addr]; s != nil {
		s.policy = p
		if fresh {
			s.learned = map[netip.Addr]learnedAddr{}
		}
	}
}

// Remove forgets the sandbox at addr.
func (e *Enforcer) Remove(addr netip.Addr) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.byAddr, addr)
}

// lookup is the sandbox at addr and its policy now; nil when no sandbox holds addr.
func (e *Enforcer) lookup(addr netip.Addr) (*sandbox, Policy) {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.byAddr[addr]
	if s == nil {
		return nil, Policy{}
	}
	return s, s.policy
}

// minHostTTL and maxHostTTL bound how long an answered address stays allowed: at least long
// enough to connect after a short-TTL answer, at most a day.
const (
	minHostTTL = 60 * time.Second
	maxHostTTL = 24 * time.Hour
)

// learn adds to a sandbox's allowed addresses those of an answer whose records' own names
// match its hostname rules, and hands them to OnLearned, before the sandbox sees the
// answer. An A record reached through a CNAME counts only if its own name is allowed too.
func (e *Enforcer) learn(from netip.Addr, answer []byte) {
	h, p := e.lookup(from)
	if h == nil || len(p.AllowHosts) == 0 {
		return
	}
	var parser dnsmessage.Parser
	if _, err := parser.Start(answer); err != nil {
		return
	}
	if err := parser.SkipAllQuestions(); err != nil {
		return
	}
	rrs, err := parser.AllAnswers()
	if err != nil {
		return
	}
	var learned []Learned
	e.mu.Lock()
	for _, rr := range rrs {
		a, ok := rr.Body.(*dnsmessage.AResource)
		if !ok || !p.AllowsHost(rr.Header.Name.String()) {
			continue
		}
		ttl := min(max(time.Duration(rr.Header.TTL)*time.Second, minHostTTL), maxHostTTL)
		learned = append(learned, Learned{Addr: netip.AddrFrom4(a.A), TTL: ttl})
		h.learned[netip.AddrFrom4(a.A)] = learnedAddr{name: strings.TrimSuffix(rr.Header.Name.String(), "."), until: time.Now().Add(ttl)}
	}
	e.mu.Unlock()
	if len(learned) > 0 && e.cfg.OnLearned != nil {
		e.cfg.OnLearned(h.id, learned)
	}
}
