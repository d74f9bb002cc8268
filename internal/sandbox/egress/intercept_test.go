package egress_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/sandbox/egress"
	"github.com/cove-dev/cove/internal/sandbox/network"
	"github.com/cove-dev/cove/internal/sandbox/network/nettest"
)

// startManager starts a Manager on a reserved test pool whose sandboxes reach nothing but
// 198.18.0.0/15, resolving through in's DNS and trusting its HTTPS server; edit changes
// the config first. Refusals go to the returned channel.
func startManager(t *testing.T, in *nettest.Internet, edit func(*network.Config)) (*network.Manager, chan egress.Denied) {
	t.Helper()
	srv := nettest.ReserveServer(t)
	denied := make(chan egress.Denied, 100)
	cfg := network.Config{Pool: srv.Pool, Table: srv.Table, LinkPrefix: srv.LinkPrefix, LogGroup: srv.LogGroup,
		DNS: []netip.AddrPort{in.DNS()}, EgressLimit: []netip.Prefix{nettest.Range}, Warm: -1,
		StateDir: t.TempDir(), UpstreamCAs: in.CAPEM,
		OnDenied: func(_ context.Context, d egress.Denied) {
			select {
			case denied <- d:
			default:
			}
		}}
	if edit != nil {
		edit(&cfg)
	}
	m, err := network.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	return m, denied
}

// waitDenied returns the first report for id that match accepts, or fails after a generous
// deadline.
func waitDenied(t *testing.T, denied chan egress.Denied, id string, match func(egress.Denied) bool) egress.Denied {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case d := <-denied:
			if d.SandboxID == id && match(d) {
				return d
			}
		case <-deadline:
			t.Fatalf("no matching denied report for %s", id)
		}
	}
}

// countingListener accepts on addr (dialed through netns when it is not "") and counts the
// connections; each is answered with an HTTP 200 and closed.
func countingListener(t *testing.T, netns, addr string) *atomic.Int32 {
	t.Helper()
	var ln net.Listener
	var err error
	if netns == "" {
		ln, err = net.Listen("tcp4", addr)
	} else {
		ln, err = nettest.ListenIn(netns, "tcp4", addr)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var n atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(2 * time.Second))
				buf := make([]byte, 4096)
				_, _ = c.Read(buf)
				_, _ = c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 7\r\nConnection: close\r\n\r\nreached"))
			}()
		}
	}()
	return &n
}

// TestInterceptorRefusesWhatTheTableRefuses: a sandbox with header rules has its TCP to
// ports 80 and 443 redirected to Cove, which dials from the host; it must refuse every
// destination the table refuses, the host's own services and other sandboxes among them.
func TestInterceptorRefusesWhatTheTableRefuses(t *testing.T) {
	in := nettest.New(t)
	m, denied := startManager(t, in, nil)
	rules := []egress.Transform{{Pattern: "web.test", Headers: map[string]string{"X-Rule": "1"}}}
	// allowOut names the whole pool: other sandboxes stay out of reach all the same.
	a := attach(t, m, "sb-int-a", egress.Policy{AllowInternet: true, Transforms: rules, AllowOut: []netip.Prefix{m.Pool()}})
	b := attach(t, m, "sb-int-b", egress.Policy{AllowInternet: true})
	hostHTTP := countingListener(t, "", net.JoinHostPort(in.Gateway.String(), "80"))
	hostTLS := countingListener(t, "", net.JoinHostPort(in.Gateway.String(), "443"))
	otherSandbox := countingListener(t, b.Netns, "0.0.0.0:80")

	t.Run("the interceptor passes an allowed destination through (the test can fail)", func(t *testing.T) {
		if _, err := nettest.Get(a.Netns, "http://"+in.Other.String()+"/"); err != nil {
			t.Fatal(err)
		}
	})
	for _, tc := range []struct {
		name string
		dst  netip.AddrPort
		seen *atomic.Int32
		kind egress.DenyKind
	}{
		{"plain HTTP to a service on the host's own address is refused", netip.AddrPortFrom(in.Gateway, 80), hostHTTP, egress.DenyHost},
		{"TLS to a service on the host's own address is refused", netip.AddrPortFrom(in.Gateway, 443), hostTLS, egress.DenyHost},
		{"plain HTTP to another sandbox is refused though allowOut names the pool", netip.AddrPortFrom(b.Addr, 80), otherSandbox, egress.DenyLinkLocal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			c, err := nettest.DialIn(ctx, a.Netns, "tcp", tc.dst.String())
			if err == nil {
				_ = c.SetDeadline(time.Now().Add(3 * time.Second))
				if tc.dst.Port() == 443 {
					_ = tls.Client(c, &tls.Config{ServerName: "other.test", InsecureSkipVerify: true}).Handshake()
				} else {
					_, _ = c.Write([]byte("GET / HTTP/1.1\r\nHost: other.test\r\n\r\n"))
					_, _ = c.Read(make([]byte, 512))
				}
				c.Close()
			}
			if n := tc.seen.Load(); n != 0 {
				t.Fatalf("the service at %s accepted %d connections from the sandbox", tc.dst, n)
			}
			d := waitDenied(t, denied, "sb-int-a", func(d egress.Denied) bool { return d.Dst == tc.dst })
			if d.Kind != tc.kind {
				t.Fatalf("refused as %+v, want kind %s", d, tc.kind)
			}
		})
	}
}

// send makes one HTTP request from inside netns to dial (an address:port), naming host in
// its Host header (and, over TLS, its SNI, trusting only roots): the status and body.
func send(t *testing.T, netns string, dial netip.AddrPort, scheme, host, path string, roots []byte) (int, string) {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(roots)
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
		TLSClientConfig: &tls.Config{RootCAs: pool},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return nettest.DialIn(ctx, netns, network, dial.String())
		}}}
	res, err := c.Get(scheme + "://" + host + path)
	if err != nil {
		t.Fatalf("%s %s via %s: %v", scheme, host, dial, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// seen returns the requests the test internet saw for path.
func seen(in *nettest.Internet, path string) []nettest.Request {
	var out []nettest.Request
	for _, r := range in.Requests() {
		if r.Path == path {
			out = append(out, r)
		}
	}
	return out
}

// TestHeaderRuleValuesGoOnlyWhereTheHostResolves: the interceptor picks a rule by the
// request's Host (or SNI), which the sandbox writes; the rule's values must go only to an
// address Cove's own lookup of that host answered, and over TLS only to a server with a
// certificate for it, never to the address the sandbox dialed.
func TestHeaderRuleValuesGoOnlyWhereTheHostResolves(t *testing.T) {
	in := nettest.New(t)
	in.SetName("web.test", in.Addr)
	in.SetName("evil.test", in.Addr) // the web host's certificate is for web.test, not evil.test
	m, denied := startManager(t, in, nil)
	const secret = "Bearer planted-secret-77c1"
	rules := []egress.Transform{
		{Pattern: "web.test", Headers: map[string]string{"Authorization": secret}},
		{Pattern: "ghost.test", Headers: map[string]string{"Authorization": secret}},
		{Pattern: "evil.test", Headers: map[string]string{"Authorization": secret}},
	}
	a := attach(t, m, "sb-dest", egress.Policy{AllowInternet: true, Transforms: rules})
	attacker := netip.AddrPortFrom(in.Other, 80) // a server the sandbox chose

	t.Run("plain HTTP naming the rule's host, sent to the sandbox's own server, goes to the host's address instead", func(t *testing.T) {
		if code, body := send(t, a.Netns, attacker, "http", "web.test", "/steal", nil); code != http.StatusOK {
			t.Fatalf("%d %q", code, body)
		}
		for _, r := range seen(in, "/steal") {
			if host, _, _ := net.SplitHostPort(r.LocalAddr); host != in.Addr.String() {
				t.Fatalf("the request reached %s, which web.test does not resolve to (Authorization %q)", r.LocalAddr, r.Header.Get("Authorization"))
			}
			if r.Header.Get("Authorization") != secret {
				t.Fatalf("web.test's own server got Authorization %q", r.Header.Get("Authorization"))
			}
		}
		if len(seen(in, "/steal")) != 1 {
			t.Fatalf("saw %d requests, want 1", len(seen(in, "/steal")))
		}
	})
	t.Run("Cove's answer for the rule's host is kept no longer than its TTL", func(t *testing.T) {
		in.SetName("moving.test", in.Addr)
		moving := attach(t, m, "sb-dest-moving", egress.Policy{AllowInternet: true,
			Transforms: []egress.Transform{{Pattern: "moving.test", Headers: map[string]string{"Authorization": secret}}}})
		if code, body := send(t, moving.Netns, attacker, "http", "moving.test", "/moving", nil); code != http.StatusOK {
			t.Fatalf("%d %q", code, body)
		}
		in.SetName("moving.test", in.Other) // the test zone's TTL is 5 s
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(500 * time.Millisecond) {
			send(t, moving.Netns, attacker, "http", "moving.test", "/moving", nil)
			r := seen(in, "/moving")
			if r[len(r)-1].LocalAddr == attacker.String() {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the request still goes to %s, which moving.test no longer resolves to", r[len(r)-1].LocalAddr)
			}
		}
	})
	t.Run("a rule whose host does not resolve sends nothing, and says so", func(t *testing.T) {
		code, body := send(t, a.Netns, attacker, "http", "ghost.test", "/ghost", nil)
		if code != http.StatusBadGateway || !strings.Contains(body, "ghost.test does not resolve") {
			t.Fatalf("%d %q, want a 502 saying ghost.test does not resolve", code, body)
		}
		if r := seen(in, "/ghost"); len(r) != 0 {
			t.Fatalf("the request went out: %+v", r)
		}
		d := waitDenied(t, denied, "sb-dest", func(d egress.Denied) bool { return d.Kind == egress.DenyHeaderRule })
		if d.Rule != "header rule ghost.test: ghost.test does not resolve" {
			t.Fatalf("reported %+v", d)
		}
	})
	t.Run("HTTPS naming the rule's host, sent to another address, goes to the host's address", func(t *testing.T) {
		if code, body := send(t, a.Netns, netip.AddrPortFrom(in.Other, 443), "https", "web.test", "/steal-tls", m.CAPEM()); code != http.StatusOK {
			t.Fatalf("%d %q", code, body)
		}
		if r := seen(in, "/steal-tls"); len(r) != 1 || !r[0].TLS || r[0].LocalAddr != netip.AddrPortFrom(in.Addr, 443).String() {
			t.Fatalf("saw %+v, want one TLS request at %s:443", r, in.Addr)
		}
	})
	t.Run("an address reached through a CNAME to a name the sandbox may not reach gets nothing", func(t *testing.T) {
		in.SetName("other.test", in.Other)
		in.SetCNAME("alias.test", "other.test")
		closed := attach(t, m, "sb-dest-closed", egress.Policy{AllowInternet: false, AllowHosts: []string{"alias.test"},
			AllowOut:   []netip.Prefix{netip.PrefixFrom(in.Addr, 32)},
			Transforms: []egress.Transform{{Pattern: "alias.test", Headers: map[string]string{"Authorization": secret}}}})
		code, body := send(t, closed.Netns, netip.AddrPortFrom(in.Addr, 80), "http", "alias.test", "/alias", nil)
		if code != http.StatusBadGateway || !strings.Contains(body, "which this sandbox's rules refuse") {
			t.Fatalf("%d %q, want a 502 saying the rules refuse the address", code, body)
		}
		if r := seen(in, "/alias"); len(r) != 0 {
			t.Fatalf("the request went out: %+v", r)
		}
	})
	t.Run("over TLS, a server without a certificate for the rule's host gets nothing", func(t *testing.T) {
		code, _ := send(t, a.Netns, netip.AddrPortFrom(in.Addr, 443), "https", "evil.test", "/evil", m.CAPEM())
		if code != http.StatusBadGateway {
			t.Fatalf("status %d, want 502", code)
		}
		if r := seen(in, "/evil"); len(r) != 0 {
			t.Fatalf("the request reached a server that is not evil.test: %+v", r)
		}
		d := waitDenied(t, denied, "sb-dest", func(d egress.Denied) bool { return strings.HasPrefix(d.Rule, "header rule evil.test") })
		if d.Kind != egress.DenyHeaderRule || d.Rule != "header rule evil.test: the server has no valid certificate for evil.test" {
			t.Fatalf("reported %+v", d)
		}
	})
}

// tokens is a boundary fake of the workload identity issuer (internal/control/oidc): the tokens each
// sandbox registered, by name.
type tokens map[string]map[string]string

func (ts tokens) Token(_ context.Context, sandboxID, name string) (string, error) {
	if tok, ok := ts[sandboxID][name]; ok {
		return tok, nil
	}
	return "", fmt.Errorf("sandbox %s registered no token %q", sandboxID, name)
}

// TestIdentityTokenPlaceholders: a header rule's ${e2b.identity.tokens.<name>} is resolved
// at egress from the sandbox's own tokens, under the same destination rule as secrets, and
// is never sent as written.
func TestIdentityTokenPlaceholders(t *testing.T) {
	in := nettest.New(t)
	in.SetName("web.test", in.Addr)
	m, denied := startManager(t, in, nil)
	rule := func(name string) []egress.Transform {
		return []egress.Transform{{Pattern: "web.test", Headers: map[string]string{"Authorization": "Bearer ${e2b.identity.tokens." + name + "}"}}}
	}
	a := attach(t, m, "sb-iam-a", egress.Policy{AllowInternet: true, Transforms: rule("web")})
	b := attach(t, m, "sb-iam-b", egress.Policy{AllowInternet: true, Transforms: rule("web")})
	m.SetIdentityTokens(tokens{"sb-iam-a": {"web": "jwt-of-a"}, "sb-iam-b": {"web": "jwt-of-b", "other": "x"}})
	web := netip.AddrPortFrom(in.Addr, 443)

	t.Run("each sandbox's request carries its own token", func(t *testing.T) {
		for _, tc := range []struct {
			netns, path, want string
		}{{a.Netns, "/iam-a", "Bearer jwt-of-a"}, {b.Netns, "/iam-b", "Bearer jwt-of-b"}} {
			if code, body := send(t, tc.netns, web, "https", "web.test", tc.path, m.CAPEM()); code != http.StatusOK {
				t.Fatalf("%d %q", code, body)
			}
			if r := seen(in, tc.path); len(r) != 1 || r[0].Header.Get("Authorization") != tc.want {
				t.Fatalf("saw %+v, want Authorization %q", r, tc.want)
			}
		}
	})
	t.Run("a token sent to another server goes to the rule's host instead", func(t *testing.T) {
		if code, body := send(t, a.Netns, netip.AddrPortFrom(in.Other, 80), "http", "web.test", "/iam-steal", nil); code != http.StatusOK {
			t.Fatalf("%d %q", code, body)
		}
		if r := seen(in, "/iam-steal"); len(r) != 1 || r[0].LocalAddr != netip.AddrPortFrom(in.Addr, 80).String() {
			t.Fatalf("saw %+v, want one request at %s:80", r, in.Addr)
		}
	})
	t.Run("a token the sandbox did not register fails the request, naming it", func(t *testing.T) {
		if err := m.Update(context.Background(), "sb-iam-a", egress.Policy{AllowInternet: true, Transforms: rule("other")}); err != nil {
			t.Fatal(err)
		}
		code, body := send(t, a.Netns, web, "https", "web.test", "/iam-unknown", m.CAPEM())
		if code != http.StatusBadGateway || !strings.Contains(body, `identity token "other"`) {
			t.Fatalf("%d %q, want a 502 naming the token", code, body)
		}
		if r := seen(in, "/iam-unknown"); len(r) != 0 {
			t.Fatalf("the request went out: %+v", r)
		}
	})
	t.Run("without an issuer the placeholder is refused, reported and never sent as written", func(t *testing.T) {
		m.SetIdentityTokens(nil)
		code, body := send(t, b.Netns, web, "https", "web.test", "/iam-off", m.CAPEM())
		if code != http.StatusBadGateway || !strings.Contains(body, "workload identity tokens are not enabled") {
			t.Fatalf("%d %q, want a 502 saying identity tokens are not enabled", code, body)
		}
		for _, r := range in.Requests() {
			if strings.Contains(r.Header.Get("Authorization"), "${") {
				t.Fatalf("the placeholder went out: %+v", r)
			}
		}
		if r := seen(in, "/iam-off"); len(r) != 0 {
			t.Fatalf("the request went out: %+v", r)
		}
		d := waitDenied(t, denied, "sb-iam-b", func(d egress.Denied) bool { return d.Kind == egress.DenyHeaderRule })
		if !strings.Contains(d.Rule, "workload identity tokens are not enabled") || d.Dst != web {
			t.Fatalf("reported %+v", d)
		}
	})
}

func TestHeaderTransforms(t *testing.T) {
	in := nettest.New(t)
	in.SetName("web.test", in.Addr) // a rule's values go only where Cove's lookup of its host leads
	srv := nettest.ReserveServer(t)
	m, err := network.New(context.Background(), network.Config{Pool: srv.Pool, Table: srv.Table, LinkPrefix: srv.LinkPrefix,
		LogGroup: srv.LogGroup, DNS: []netip.AddrPort{in.DNS()}, EgressLimit: []netip.Prefix{nettest.Range}, Warm: -1,
		StateDir: t.TempDir(), UpstreamCAs: in.CAPEM})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	const secret = "Bearer planted-secret-9f3a"
	rules := []egress.Transform{{Pattern: "web.test", Headers: map[string]string{"Authorization": secret}}}
	a := attach(t, m, "sb-rules", egress.Policy{AllowInternet: true, Transforms: rules})
	closed := attach(t, m, "sb-rules-closed", egress.Policy{AllowInternet: false, Transforms: rules})
	// client speaks HTTPS from inside netns to the web host, trusting roots, naming sni.
	client := func(netns string, roots []byte) *http.Client {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(roots)
		return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
			TLSClientConfig: &tls.Config{RootCAs: pool},
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return nettest.DialIn(ctx, netns, network, net.JoinHostPort(in.Addr.String(), "443"))
			}}}
	}
	last := func() nettest.Request { r := in.Requests(); return r[len(r)-1] }
	t.Run("an HTTPS request to a host with a rule gets the header on the host side, under Cove's CA", func(t *testing.T) {
		res, err := client(a.Netns, m.CAPEM()).Get("https://web.test/api")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if got := last(); got.Header.Get("Authorization") != secret || !got.TLS || got.Path != "/api" {
			t.Fatalf("the test host saw %+v", got)
		}
	})
	t.Run("a plain HTTP request to a host with a rule gets the header", func(t *testing.T) {
		c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return nettest.DialIn(ctx, a.Netns, network, net.JoinHostPort(in.Addr.String(), "80"))
			}}}
		res, err := c.Get("http://web.test/plain")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if got := last(); got.Header.Get("Authorization") != secret || got.Path != "/plain" {
			t.Fatalf("the test host saw %+v", got)
		}
	})
	t.Run("HTTPS to a host without a rule passes through untouched, with the server's own certificate", func(t *testing.T) {
		res, err := client(a.Netns, in.CAPEM).Get("https://" + in.Addr.String() + "/through")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if got := last(); got.Header.Get("Authorization") != "" || got.Path != "/through" {
			t.Fatalf("the test host saw %+v", got)
		}
	})
	t.Run("a rule grants no access", func(t *testing.T) {
		before := len(in.Requests())
		if res, err := client(closed.Netns, m.CAPEM()).Get("https://web.test/"); err == nil {
			res.Body.Close()
			t.Fatal("a sandbox without internet access reached the host through its rule")
		}
		if len(in.Requests()) != before {
			t.Fatal("the request reached the test host")
		}
	})
}
