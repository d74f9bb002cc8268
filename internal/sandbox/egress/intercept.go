package egress

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
)

// Transform is E2B's network rule for one host pattern: headers set on every outbound HTTP
// and HTTPS request to a matching host, on the host side. The values never enter the
// sandbox. Rules do not grant access: allowOut decides that.
type Transform struct {
	Pattern string            // "api.example.com" or "*.example.com" (subdomains, not the apex)
	Headers map[string]string // name -> value; an existing header of that name is replaced
}

// transformFor is the transform of host: an exact pattern first, else the longest matching
// wildcard; rule sets are not merged.
func (p Policy) transformFor(host string) *Transform {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	var best *Transform
	for i := range p.Transforms {
		t := &p.Transforms[i]
		if t.Pattern == host {
			return t
		}
		if suffix, ok := strings.CutPrefix(t.Pattern, "*"); ok && strings.HasSuffix(host, suffix) && len(host) > len(suffix) {
			if best == nil || len(t.Pattern) > len(best.Pattern) {
				best = t
			}
		}
	}
	return best
}

// ca is the Cove CA that signs the certificates the intercepting proxy shows sandboxes; the
// sandboxes trust it (internal/sandbox/network's TrustBundle adds it to theirs).
type ca struct {
	cert  *x509.Certificate
	key   *ecdsa.PrivateKey
	pem   []byte
	mu    sync.Mutex
	leafs map[string]*tls.Certificate
}

// newCA makes the CA: from seed (32 secret bytes), one whose key and certificate fields are
// the seed's, the same at every start and on every node given it; without one, a random CA of
// this start only.
func newCA(seed []byte) (*ca, error) {
	var key *ecdsa.PrivateKey
	var err error
	tmpl := &x509.Certificate{Subject: pkix.Name{CommonName: "Cove egress CA"},
		IsCA: true, BasicConstraintsValid: true, MaxPathLenZero: true, KeyUsage: x509.KeyUsageCertSign}
	if seed == nil {
		if key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
			return nil, err
		}
		tmpl.SerialNumber = big.NewInt(time.Now().UnixNano())
		tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(10*365*24*time.Hour)
	} else {
		// A scalar is valid below the curve's order: a hash of the seed otherwise (a chance
		// of about 2^-32 for each try).
		for scalar := seed; key == nil; {
			if key, err = ecdsa.ParseRawPrivateKey(elliptic.P256(), scalar); err != nil {
				h := sha256.Sum256(scalar)
				scalar = h[:]
			}
		}
		pub, err := key.PublicKey.Bytes()
		if err != nil {
			return nil, err
		}
		h := sha256.Sum256(pub)
		tmpl.SerialNumber = new(big.Int).SetBytes(h[:16])
		tmpl.NotBefore = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		tmpl.NotAfter = tmpl.NotBefore.AddDate(20, 0, 0)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &ca{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), leafs: map[string]*tls.Certificate{}}, nil
}

// Keeper keeps the interception CA's key secret: the server's vault (internal/control/vault).
type Keeper interface {
	// Derive returns 32 secret bytes for label, the same at every start (and on every node of
	// a cluster, whose vaults share one key).
	Derive(label string) []byte
	Seal(name string, plain []byte) ([]byte, error)
	Unseal(name string, sealed []byte) ([]byte, error)
}

// caKeyLabel names the CA key's derivation and its sealed name.
const caKeyLabel = "egress-ca-key"

// loadCA returns the CA the intercepting proxy signs with. Its key is derived from the
// keeper's, never written (only its certificate is, ca.pem in dir): the same after a restart (the sandboxes a restarted server adopts
// trust the CA their bundle holds) and on every node of a cluster (a sandbox moved to
// another node keeps trusting its proxy). Without a keeper (a manager of tests), a CA of this
// start only.
//
// An older release made a random CA and kept its key in the clear in dir (ca-key.pem beside
// ca.pem): its sandboxes trust that one, so it stays, sealed (ca-key.sealed), and the clear
// file is removed.
func loadCA(dir string, k Keeper) (*ca, error) {
	if k == nil {
		return newCA(nil)
	}
	c, err := legacyCA(dir, k)
	if c != nil || err != nil {
		return c, err
	}
	if c, err = newCA(k.Derive(caKeyLabel)); err != nil {
		return nil, err
	}
	// An ECDSA signature differs at each signing, so each start's certificate would differ
	// in its bytes (not in its key, which is what trust rests on): keep the first one made
	// here (public, ca.pem), so a restarted server hands sandboxes the very bundle they hold.
	certFile := filepath.Join(dir, "ca.pem")
	if b, err := os.ReadFile(certFile); err == nil {
		if cb, _ := pem.Decode(b); cb != nil {
			if cert, err := x509.ParseCertificate(cb.Bytes); err == nil && c.key.PublicKey.Equal(cert.PublicKey) && time.Now().Before(cert.NotAfter) {
				c.cert, c.pem = cert, b
				return c, nil
			}
		}
	}
	if err := replaceFile(certFile, c.pem, 0o644); err != nil {
		return nil, fmt.Errorf("keep the CA's certificate: %w", err)
	}
	return c, nil
}

// legacyCA returns the CA an older release made in dir, sealing its key when it is still in
// the clear; nil when there is none (or it expired).
func legacyCA(dir string, k Keeper) (*ca, error) {
	certFile := filepath.Join(dir, "ca.pem")
	clearFile, sealedFile := filepath.Join(dir, "ca-key.pem"), filepath.Join(dir, "ca-key.sealed")
	certPEM, err := os.ReadFile(certFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	keyPEM, clearErr := os.ReadFile(clearFile)
	if clearErr != nil {
		sealed, err := os.ReadFile(sealedFile)
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		if keyPEM, err = k.Unseal(caKeyLabel, sealed); err != nil {
			return nil, fmt.Errorf("unseal the CA key %s: %w", sealedFile, err)
		}
	}
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, nil
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil || !time.Now().Before(cert.NotAfter) {
		return nil, nil
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil
	}
	if clearErr == nil {
		sealed, err := k.Seal(caKeyLabel, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("seal the CA key: %w", err)
		}
		if err := replaceFile(sealedFile, sealed, 0o600); err != nil {
			return nil, fmt.Errorf("seal the CA key: %w", err)
		}
		if err := os.Remove(clearFile); err != nil {
			return nil, fmt.Errorf("remove the clear CA key: %w", err)
		}
	}
	return &ca{cert: cert, key: key, pem: certPEM, leafs: map[string]*tls.Certificate{}}, nil
}

// replaceFile writes b to path through a temporary file renamed over it, so a crash leaves
// the old file or the new, never half of one.
func replaceFile(path string, b []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// leaf returns a certificate for host signed by the CA, cached.
func (c *ca) leaf(host string) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if l := c.leafs[host]; l != nil {
		return l, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: host},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(30 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	if a, err := netip.ParseAddr(host); err == nil {
		tmpl.IPAddresses = []net.IP{a.AsSlice()}
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		return nil, err
	}
	l := &tls.Certificate{Certificate: [][]byte{der, c.cert.Raw}, PrivateKey: key}
	c.leafs[host] = l
	return l, nil
}

// CAPEM is the Cove CA certificate sandboxes trust.
func (e *Enforcer) CAPEM() []byte { return e.ca.pem }

// intercept serves one HTTP (port 80) or TLS (port 443) connection of a sandbox with
// transforms: a request to a host with a transform gets its headers set, HTTPS terminated
// with the Cove CA and re-encrypted upstream; anything else passes through untouched.
func (e *Enforcer) intercept(c net.Conn, h *sandbox, p Policy, dst netip.AddrPort) {
	if dst.Port() == 443 {
		sni, replay, err := peekSNI(c)
		if err != nil {
			return
		}
		t := p.transformFor(sni)
		if t == nil || sni == "" {
			e.passThrough(replay, dst)
			return
		}
		tc := tls.Server(replay, &tls.Config{GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return e.ca.leaf(sni) }})
		e.serveHTTP(tc, h, p, dst, "https", sni)
		return
	}
	e.serveHTTP(c, h, p, dst, "http", "")
}

// route is where one request goes and the headers it gets (ruleRequest).
type route struct {
	to      netip.AddrPort
	headers map[string]string
	rule    *Transform // the rule that applies, nil for none
}

type routeKey struct{}

// serveHTTP reads the sandbox's requests on c: one to a host with a transform goes where
// ruleRequest says, with the transform's headers; any other to dst, untouched.
func (e *Enforcer) serveHTTP(c net.Conn, h *sandbox, p Policy, dst netip.AddrPort, scheme, sni string) {
	tr := &http.Transport{
		// The request's URL names the address to dial (Rewrite); the server's name is
		// checked against sni over TLS.
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", addr)
		},
		TLSClientConfig:   &tls.Config{ServerName: sni, RootCAs: e.upstreamRoots},
		ForceAttemptHTTP2: false,
	}
	defer tr.CloseIdleConnections()
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			rt, _ := r.In.Context().Value(routeKey{}).(route)
			r.Out.URL.Scheme, r.Out.URL.Host = scheme, rt.to.String()
			r.Out.Host = r.In.Host
			for k, v := range rt.headers {
				r.Out.Header.Set(k, v)
			}
		},
		Transport: tr,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			var bad *tls.CertificateVerificationError
			if rt, _ := r.Context().Value(routeKey{}).(route); rt.rule != nil && errors.As(err, &bad) {
				e.sample(loggedPacket{kind: DenyHeaderRule, src: h.addr, dst: rt.to, protocol: "tcp", at: time.Now(),
					rule: fmt.Sprintf("header rule %s: the server has no valid certificate for %s", rt.rule.Pattern, printable(sni))})
				http.Error(w, fmt.Sprintf("cove egress: the header rule for %s is not applied: the server at %s has no valid certificate for %s", rt.rule.Pattern, rt.to, sni), http.StatusBadGateway)
				return
			}
			http.Error(w, "cove egress: upstream failed", http.StatusBadGateway)
		},
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		host = strings.ToLower(strings.TrimSuffix(host, "."))
		rt := route{to: dst}
		if t := p.transformFor(host); t != nil && (scheme == "http" || strings.EqualFold(host, sni)) {
			var err error
			if rt, err = e.ruleRequest(r.Context(), h, p, t, host, dst); err != nil {
				http.Error(w, "cove egress: "+err.Error(), http.StatusBadGateway)
				return
			}
		}
		rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), routeKey{}, rt)))
	})
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 30 * time.Second}
	_ = srv.Serve(&oneConn{c: c, done: make(chan struct{})})
}

// ruleRequest decides where a request to host, whose transform is t, goes and with which
// headers. A rule's values may only travel to an address Cove's own lookup of host answered
// (the sandbox's destination when the answer holds it, else the answer's first the
// sandbox's policy allows), over TLS only to a server with a certificate for host (the
// transport checks sni); never to an address the sandbox picked outside that answer. A
// refusal is reported (network.denied) and nothing is sent.
func (e *Enforcer) ruleRequest(ctx context.Context, h *sandbox, p Policy, t *Transform, host string, dst netip.AddrPort) (route, error) {
	report := func(kind DenyKind, to netip.AddrPort, rule string) {
		e.sample(loggedPacket{kind: kind, src: h.addr, dst: to, protocol: "tcp", at: time.Now(), rule: rule})
	}
	refuse := func(kind DenyKind, to netip.AddrPort, rule string, err error) (route, error) {
		report(kind, to, rule)
		return route{}, err
	}
	// Cove's lookup is a query out like the sandbox's own: a sandbox without internet access
	// may only have its allowed hostnames looked up, and the rule's own name (the rule's
	// author chose it, not the sandbox).
	if p.offline() && !p.AllowsHost(host) && host != t.Pattern {
		kind, rule := p.offlineRule()
		return refuse(kind, dst, fmt.Sprintf("%s (DNS query for %s not forwarded)", rule, printable(host)),
			fmt.Errorf("the header rule for %s is not applied: this sandbox has no internet access and %s is not in its allowOut", t.Pattern, host))
	}
	addrs, err := e.resolver.lookupA(host)
	if err != nil {
		return refuse(DenyHeaderRule, dst, fmt.Sprintf("header rule %s: %s does not resolve", t.Pattern, printable(host)),
			fmt.Errorf("the header rule for %s is not applied: %s does not resolve: %w", t.Pattern, host, err))
	}
	if i := slices.IndexFunc(addrs, func(a answered) bool { return a.addr == dst.Addr() }); i > 0 {
		addrs[0], addrs[i] = addrs[i], addrs[0]
	}
	var to netip.AddrPort
	for _, a := range addrs {
		if _, ok := e.decideNamed(h, a.addr, a.name); ok {
			to = netip.AddrPortFrom(a.addr, dst.Port())
			break
		}
	}
	if !to.IsValid() {
		kind, _ := e.decideNamed(h, addrs[0].addr, addrs[0].name)
		report(kind, netip.AddrPortFrom(addrs[0].addr, dst.Port()), "") // the rule that refused it, as the table words it
		return route{}, fmt.Errorf("the header rule for %s is not applied: %s resolves to %s, which this sandbox's rules refuse", t.Pattern, host, addrs[0].addr)
	}
	headers, err := e.resolveHeaders(ctx, p.Team, h.id, t.Headers)
	if err != nil {
		return refuse(DenyHeaderRule, to, fmt.Sprintf("header rule %s: %v", t.Pattern, err), err)
	}
	return route{to: to, headers: headers, rule: t}, nil
}

// placeholder is how a rule's header value names a team secret (the SDKs' Secret.fill) or
// one of the sandbox's workload identity tokens (create's iam).
var placeholder = regexp.MustCompile(`\$\{e2b\.(?:secrets\.([A-Za-z0-9._-]+)|identity\.tokens\.([^{}\x00-\x1f\x7f]+))\}`)

// IdentityTokens mints the workload identity tokens a sandbox's egress rules name as
// ${e2b.identity.tokens.<name>}.
type IdentityTokens interface {
	// Token returns a currently valid token named name for the sandbox, or an error when the
	// sandbox registered no such token.
	Token(ctx context.Context, sandboxID, name string) (string, error)
}

// identitySource holds the enforcer's IdentityTokens (an interface in an atomic pointer).
type identitySource struct{ IdentityTokens }

// SetIdentityTokens sets what resolves the ${e2b.identity.tokens.<name>} placeholders of
// header rules, at egress, as secrets are; nil (the default) refuses every request whose
// rule names one. Safe to call while sandboxes run.
func (e *Enforcer) SetIdentityTokens(t IdentityTokens) {
	if t == nil {
		e.identity.Store(nil)
		return
	}
	e.identity.Store(&identitySource{t})
}

// errNoIdentity: the server resolves no identity token.
var errNoIdentity = errors.New("workload identity tokens are not enabled on this server")

// resolveHeaders replaces the placeholders of a rule's headers with the team's secrets and
// the sandbox's identity tokens; one that does not resolve fails the request rather than
// send the placeholder.
func (e *Enforcer) resolveHeaders(ctx context.Context, team, sandboxID string, in map[string]string) (map[string]string, error) {
	out := make(map[string]string, len(in))
	var missing, tokenErrs []string
	for k, v := range in {
		out[k] = placeholder.ReplaceAllStringFunc(v, func(ph string) string {
			sub := placeholder.FindStringSubmatch(ph)
			if secret := sub[1]; secret != "" {
				if e.cfg.SecretValue != nil {
					if val, ok := e.cfg.SecretValue(team, strings.ToLower(secret)); ok {
						return val
					}
				}
				missing = append(missing, secret)
				return ""
			}
			name := sub[2]
			src := e.identity.Load()
			if src == nil {
				tokenErrs = append(tokenErrs, fmt.Sprintf("identity token %q: %v", name, errNoIdentity))
				return ""
			}
			tok, err := src.Token(ctx, sandboxID, name)
			if err != nil || tok == "" {
				tokenErrs = append(tokenErrs, fmt.Sprintf("identity token %q: %v", name, err))
				return ""
			}
			return tok
		})
	}
	var errs []error
	if len(missing) > 0 {
		slices.Sort(missing)
		errs = append(errs, fmt.Errorf("the header rule names secrets that do not exist: %s", strings.Join(missing, ", ")))
	}
	if len(tokenErrs) > 0 {
		slices.Sort(tokenErrs)
		errs = append(errs, fmt.Errorf("the header rule's %s", strings.Join(tokenErrs, "; ")))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

// passThrough splices c to dst unchanged.
func (e *Enforcer) passThrough(c net.Conn, dst netip.AddrPort) {
	up, err := net.DialTimeout("tcp", dst.String(), 10*time.Second)
	if err != nil {
		return
	}
	defer up.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); closeWrite(up); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); closeWrite(c); done <- struct{}{} }()
	<-done
	<-done
}

// peekSNI reads the TLS ClientHello's server name and returns a conn that replays it.
func peekSNI(c net.Conn) (string, net.Conn, error) {
	var buf bytes.Buffer
	var sni string
	errStop := errors.New("stop")
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	err := tls.Server(readOnly{io.TeeReader(c, &buf)}, &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		sni = h.ServerName
		return nil, errStop
	}}).Handshake()
	_ = c.SetReadDeadline(time.Time{})
	if !errors.Is(err, errStop) && sni == "" {
		return "", nil, fmt.Errorf("not a TLS client hello: %w", err)
	}
	return sni, &replayConn{Conn: c, r: io.MultiReader(&buf, c)}, nil
}

// readOnly is a net.Conn over a reader whose writes go nowhere (the peek never answers).
type readOnly struct{ r io.Reader }

func (c readOnly) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (readOnly) Write(p []byte) (int, error)        { return 0, errors.New("peek only") }
func (readOnly) Close() error                       { return nil }
func (readOnly) LocalAddr() net.Addr                { return &net.TCPAddr{} }
func (readOnly) RemoteAddr() net.Addr               { return &net.TCPAddr{} }
func (readOnly) SetDeadline(t time.Time) error      { return nil }
func (readOnly) SetReadDeadline(t time.Time) error  { return nil }
func (readOnly) SetWriteDeadline(t time.Time) error { return nil }

type replayConn struct {
	net.Conn
	r io.Reader
}

func (c *replayConn) Read(p []byte) (int, error) { return c.r.Read(p) }

func (c *replayConn) CloseWrite() error {
	if tc, ok := c.Conn.(*net.TCPConn); ok {
		return tc.CloseWrite()
	}
	return nil
}

// oneConn is a listener that yields one connection, then blocks until it is closed.
type oneConn struct {
	c    net.Conn
	once sync.Once
	done chan struct{}
}

func (l *oneConn) Accept() (net.Conn, error) {
	var c net.Conn
	l.once.Do(func() { c = &closeNotify{Conn: l.c, done: l.done} })
	if c != nil {
		return c, nil
	}
	<-l.done
	return nil, net.ErrClosed
}
func (l *oneConn) Close() error   { return nil }
func (l *oneConn) Addr() net.Addr { return l.c.LocalAddr() }

type closeNotify struct {
	net.Conn
	done chan struct{}
	once sync.Once
}

func (c *closeNotify) Close() error {
	c.once.Do(func() { close(c.done) })
	return c.Conn.Close()
}
