package network_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/cove-dev/cove/internal/network"
	"github.com/cove-dev/cove/internal/network/nettest"
)

// newManager starts a Manager on a reserved test pool whose sandboxes can reach nothing but
// 198.18.0.0/15, resolving through in's DNS server.
func newManager(t *testing.T, in *nettest.Internet, warm int, onDenied ...func(context.Context, network.Denied)) *network.Manager {
	t.Helper()
	srv := nettest.ReserveServer(t)
	ctx := context.Background()
	cfg := network.Config{
		Pool: srv.Pool, Table: srv.Table, LinkPrefix: srv.LinkPrefix, LogGroup: srv.LogGroup,
		DNS:         []netip.AddrPort{in.DNS()},
		EgressLimit: []netip.Prefix{nettest.Range},
		Warm:        warm,
		StateDir:    t.TempDir(),
	}
	if len(onDenied) > 0 {
		cfg.OnDenied = onDenied[0]
	}
	m, err := network.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(context.Background()); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return m
}

func attach(t *testing.T, m *network.Manager, id string, p network.Policy) *network.Attachment {
	t.Helper()
	a, err := m.Attach(context.Background(), id, p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Detach(context.Background(), id) })
	return a
}

// get fetches url from inside the namespace at netns; the error says why it could not.
func get(netns, url string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return nettest.DialIn(ctx, netns, network, addr)
		}}}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	res, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return string(b), err
}

// lookup asks the resolver named in the sandbox's resolv.conf for name's A record.
func lookup(t *testing.T, a *network.Attachment, name string) (netip.Addr, dnsmessage.RCode) {
	t.Helper()
	conf, err := os.ReadFile(a.ResolvConf)
	if err != nil {
		t.Fatal(err)
	}
	server := strings.TrimSpace(strings.TrimPrefix(string(conf), "nameserver"))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := nettest.DialIn(ctx, a.Netns, "udp", net.JoinHostPort(server, "53"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 7, RecursionDesired: true})
	_ = b.StartQuestions()
	_ = b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name + "."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET})
	q, _ := b.Finish()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(q); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1500)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("no DNS answer from %s: %v", server, err)
	}
	var p dnsmessage.Parser
	h, err := p.Start(buf[:n])
	if err != nil {
		t.Fatal(err)
	}
	_ = p.SkipAllQuestions()
	ans, err := p.AllAnswers()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range ans {
		if a, ok := r.Body.(*dnsmessage.AResource); ok {
			return netip.AddrFrom4(a.A), h.RCode
		}
	}
	return netip.Addr{}, h.RCode
}

func TestEgress(t *testing.T) {
	in := nettest.New(t)
	m := newManager(t, in, 1)
	on := attach(t, m, "sb-on", network.Policy{AllowInternet: true})
	off := attach(t, m, "sb-off", network.Policy{AllowInternet: false})

	t.Run("a sandbox with internet access reaches the test host, masqueraded", func(t *testing.T) {
		body, err := get(on.Netns, in.URL("http", "/hello"))
		if err != nil || !strings.Contains(body, "hello") {
			t.Fatalf("GET: %q, %v", body, err)
		}
		reqs := in.Requests()
		last := reqs[len(reqs)-1]
		if host, _, _ := net.SplitHostPort(last.RemoteAddr); host != in.Gateway.String() {
			t.Errorf("the test host saw %s, want the host's address %s (NAT)", last.RemoteAddr, in.Gateway)
		}
	})
	t.Run("a sandbox without internet access reaches nothing", func(t *testing.T) {
		if body, err := get(off.Netns, in.URL("http", "/")); err == nil {
			t.Fatalf("GET succeeded: %q", body)
		}
	})
	t.Run("names resolve through Cove's resolver, which forwards to the configured upstream", func(t *testing.T) {
		in.SetName("web.test", in.Addr)
		if got, rcode := lookup(t, on, "web.test"); got != in.Addr {
			t.Fatalf("web.test = %v (%v), want %v", got, rcode, in.Addr)
		}
		if _, rcode := lookup(t, on, "missing.test"); rcode != dnsmessage.RCodeNameError {
			t.Fatalf("missing.test: rcode %v, want NXDOMAIN", rcode)
		}
	})
	t.Run("an update takes effect on the open sandbox", func(t *testing.T) {
		p := network.Policy{AllowInternet: false, AllowOut: []netip.Prefix{netip.PrefixFrom(in.Other, 32)}}
		if err := m.Update(context.Background(), "sb-off", p); err != nil {
			t.Fatal(err)
		}
		if _, err := get(off.Netns, "http://"+in.Other.String()+"/"); err != nil {
			t.Fatalf("allowed host: %v", err)
		}
		if _, err := get(off.Netns, in.URL("http", "/")); err == nil {
			t.Fatal("a host outside allowOut answered")
		}
	})
	t.Run("allowOut wins over denyOut", func(t *testing.T) {
		p := network.Policy{AllowInternet: true, DenyOut: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")},
			AllowOut: []netip.Prefix{netip.PrefixFrom(in.Addr, 32)}}
		if err := m.Update(context.Background(), "sb-off", p); err != nil {
			t.Fatal(err)
		}
		if _, err := get(off.Netns, in.URL("http", "/")); err != nil {
			t.Fatalf("allowed host: %v", err)
		}
		if _, err := get(off.Netns, "http://"+in.Other.String()+"/"); err == nil {
			t.Fatal("a denied host answered")
		}
	})
}

func TestIsolation(t *testing.T) {
	in := nettest.New(t)
	m := newManager(t, in, -1)
	a := attach(t, m, "sb-a", network.Policy{AllowInternet: true})
	b := attach(t, m, "sb-b", network.Policy{AllowInternet: true})

	// A service on the host, on every address, as the API, proxy and metrics ports are.
	hostLn, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hostLn.Close() })
	go func() {
		for {
			c, err := hostLn.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := hostLn.Addr().(*net.TCPAddr).Port
	// A service in sandbox b.
	bLn, err := nettest.ListenIn(b.Netns, "tcp", fmt.Sprintf("0.0.0.0:%d", 8080))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bLn.Close() })

	for _, tc := range []struct{ name, addr string }{
		{"a sandbox does not reach a host service through its gateway", net.JoinHostPort(a.Gateway.String(), fmt.Sprint(port))},
		{"a sandbox does not reach a host service on the host's other addresses", net.JoinHostPort(in.Gateway.String(), fmt.Sprint(port))},
		{"a sandbox does not reach another sandbox", net.JoinHostPort(b.Addr.String(), "8080")},
		{"a sandbox does not reach another sandbox's gateway", net.JoinHostPort(b.Gateway.String(), fmt.Sprint(port))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
			defer cancel()
			c, err := nettest.DialIn(ctx, a.Netns, "tcp", tc.addr)
			if err == nil {
				c.Close()
				t.Fatalf("connected to %s", tc.addr)
			}
		})
	}
	t.Run("the same host service answers from outside the sandbox (the test can fail)", func(t *testing.T) {
		c, err := net.DialTimeout("tcp", net.JoinHostPort(in.Gateway.String(), fmt.Sprint(port)), 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
		c, err = nettest.DialIn(context.Background(), b.Netns, "tcp", "127.0.0.1:8080")
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
	})
}

func TestHostnameRules(t *testing.T) {
	in := nettest.New(t)
	in.SetName("web.test", in.Addr)
	in.SetName("other.test", in.Other)
	in.SetCNAME("alias.test", "other.test")
	in.SetName("x.apps.test", in.Addr)
	in.SetName("apps.test", in.Other)
	m := newManager(t, in, -1)
	web, other := in.URL("http", "/"), "http://"+in.Other.String()+"/"
	n := 0
	fresh := func(t *testing.T, hosts ...string) *network.Attachment {
		n++
		p, err := network.ParsePolicy(network.Spec{AllowInternet: new(bool), AllowOut: hosts}, false)
		if err != nil {
			t.Fatal(err)
		}
		return attach(t, m, fmt.Sprintf("sb-host-%d", n), p)
	}
	t.Run("an allowed name's address is reachable once Cove's resolver answered it", func(t *testing.T) {
		a := fresh(t, "web.test")
		if got, _ := lookup(t, a, "web.test"); got != in.Addr {
			t.Fatalf("web.test = %v", got)
		}
		if _, err := get(a.Netns, web); err != nil {
			t.Fatal(err)
		}
		if _, err := get(a.Netns, other); err == nil {
			t.Fatal("an address no allowed name resolved to answered")
		}
	})
	t.Run("the literal address of an allowed name is refused until the sandbox resolves the name", func(t *testing.T) {
		a := fresh(t, "web.test")
		if _, err := get(a.Netns, web); err == nil {
			t.Fatal("the literal address answered before any lookup")
		}
	})
	t.Run("a CNAME from an allowed name to one not allowed opens nothing", func(t *testing.T) {
		a := fresh(t, "alias.test")
		if got, _ := lookup(t, a, "alias.test"); got != in.Other {
			t.Fatalf("alias.test = %v, want %v through the CNAME", got, in.Other)
		}
		if _, err := get(a.Netns, other); err == nil {
			t.Fatal("the CNAME target's address answered")
		}
	})
	t.Run("a wildcard allows subdomains but not the apex", func(t *testing.T) {
		a := fresh(t, "*.apps.test")
		lookup(t, a, "apps.test")
		if _, err := get(a.Netns, other); err == nil {
			t.Fatal("the apex's address answered")
		}
		lookup(t, a, "x.apps.test")
		if _, err := get(a.Netns, web); err != nil {
			t.Fatalf("a subdomain's address: %v", err)
		}
	})
	t.Run("another sandbox's lookups open nothing for this one", func(t *testing.T) {
		a, b := fresh(t, "web.test"), fresh(t, "web.test")
		lookup(t, a, "web.test")
		if _, err := get(b.Netns, web); err == nil {
			t.Fatal("a sandbox reached an address only another one resolved")
		}
	})
}

func TestParsePolicy(t *testing.T) {
	for _, tc := range []struct {
		name    string
		spec    network.Spec
		wantErr string
	}{
		{"CIDRs, addresses, hostnames and header rules naming secrets and identity tokens are accepted", network.Spec{
			AllowOut: []string{"10.0.0.0/8", "1.2.3.4", "API.Example.com", "*.example.org"}, DenyOut: []string{"0.0.0.0/0"},
			Rules: map[string][]map[string]string{"web.test": {{"Authorization": "Bearer ${e2b.secrets.openai}", "X-Id": "${e2b.identity.tokens.web}"}}}}, ""},
		{"a malformed CIDR names its entry", network.Spec{DenyOut: []string{"1.2.3.4", "10.0.0.0/33"}}, "network.denyOut[1]"},
		{"a hostname in denyOut is refused", network.Spec{DenyOut: []string{"example.com"}}, "hostnames are not supported in denyOut"},
		{"a bare * is refused", network.Spec{AllowOut: []string{"*"}}, `network.allowOut[0] "*"`},
		{"IPv6 is refused", network.Spec{AllowOut: []string{"::1"}}, "only IPv4"},
		{"more than 1000 entries are refused", network.Spec{DenyOut: make([]string, 1001)}, "more than 1000"},
		{"a header value with a placeholder Cove does not resolve is refused", network.Spec{Rules: map[string][]map[string]string{
			"web.test": {{"Authorization": "Bearer ${e2b.identity.token.web}"}}}}, `network.rules["web.test"][0].transform.headers["Authorization"]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := network.ParsePolicy(tc.spec, true)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if got := strings.Join(p.AllowOutStrings(), " "); got != "10.0.0.0/8 1.2.3.4/32 api.example.com *.example.org" {
					t.Errorf("allowOut echoed as %q", got)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestDeniedConnectionsAreReported(t *testing.T) {
	in := nettest.New(t)
	denied := make(chan network.Denied, 100)
	m := newManager(t, in, -1, func(_ context.Context, d network.Denied) { denied <- d })
	closed := attach(t, m, "sb-closed", network.Policy{AllowInternet: false})
	denyOne := attach(t, m, "sb-deny", network.Policy{AllowInternet: true, DenyOut: []netip.Prefix{netip.PrefixFrom(in.Other, 32)}})
	// wait returns the first report for id, or fails after a generous deadline.
	wait := func(t *testing.T, id string) network.Denied {
		t.Helper()
		deadline := time.After(20 * time.Second)
		for {
			select {
			case d := <-denied:
				if d.SandboxID == id {
					return d
				}
			case <-deadline:
				t.Fatalf("no denied connection reported for %s", id)
			}
		}
	}
	for _, tc := range []struct {
		name, id, netns, url string
		want                 network.Denied
	}{
		{"a sandbox without internet access: destination, port and the rule", "sb-closed", closed.Netns, in.URL("http", "/"),
			network.Denied{Dst: netip.AddrPortFrom(in.Addr, 80), Proto: "tcp", Kind: network.DenyNoNet, Rule: "allowInternetAccess false"}},
		{"a denyOut entry names itself", "sb-deny", denyOne.Netns, "http://" + in.Other.String() + ":8080/",
			network.Denied{Dst: netip.AddrPortFrom(in.Other, 8080), Proto: "tcp", Kind: network.DenyOut, Rule: "denyOut " + in.Other.String() + "/32"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for range 3 {
				_, _ = get(tc.netns, tc.url)
			}
			d := wait(t, tc.id)
			if d.Dst != tc.want.Dst || d.Proto != tc.want.Proto || d.Kind != tc.want.Kind || d.Rule != tc.want.Rule || d.Count < 1 {
				t.Fatalf("reported %+v, want %+v", d, tc.want)
			}
		})
	}
	t.Run("a flood is sampled: a few reports, not one per packet", func(t *testing.T) {
		for len(denied) > 0 {
			<-denied
		}
		for i := range 200 {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			c, err := nettest.DialIn(ctx, closed.Netns, "tcp", fmt.Sprintf("%s:%d", in.Addr, 10000+i))
			cancel()
			if err == nil {
				c.Close()
			}
		}
		begun := time.Now()
		reports, packets := 0, 0
		for window := time.After(5 * time.Second); ; {
			select {
			case d := <-denied:
				reports++
				packets += d.Count
				continue
			case <-window:
			}
			break
		}
		flushes := int(time.Since(begun)/(2*time.Second)) + 2
		if reports == 0 || reports > 5*flushes {
			t.Errorf("%d reports in %d flushes, want 1 to %d", reports, flushes, 5*flushes)
		}
		if packets >= 200 {
			t.Errorf("%d packets logged for 200 refused connects: the kernel's sampling did not hold", packets)
		}
	})
}

func TestEgressProxy(t *testing.T) {
	in := nettest.New(t)
	socks, stopSOCKS, err := in.StartSOCKS()
	if err != nil {
		t.Fatal(err)
	}
	m := newManager(t, in, -1)
	proxy := &network.EgressProxy{Address: socks.String(), Username: nettest.SOCKSUser, Password: nettest.SOCKSPassword}
	a := attach(t, m, "sb-proxied", network.Policy{AllowInternet: true, EgressProxy: proxy,
		DenyOut: []netip.Prefix{netip.PrefixFrom(in.Addr, 32)}})
	other := "http://" + in.Other.String() + "/"
	t.Run("TCP goes through the SOCKS5 proxy, not direct", func(t *testing.T) {
		if _, err := get(a.Netns, other); err != nil {
			t.Fatal(err)
		}
		if c := in.SOCKSConnects(); len(c) != 1 || c[0] != in.Other.String()+":80" {
			t.Fatalf("the proxy connected to %v, want [%s:80]", c, in.Other)
		}
		reqs := in.Requests()
		if host, _, _ := net.SplitHostPort(reqs[len(reqs)-1].RemoteAddr); host == in.Gateway.String() {
			t.Fatalf("the request came from the host's NAT address %s: it did not go through the proxy", host)
		}
	})
	t.Run("the sandbox's rules apply before the proxy", func(t *testing.T) {
		if _, err := get(a.Netns, in.URL("http", "/")); err == nil {
			t.Fatal("a denied destination answered through the proxy")
		}
		if c := in.SOCKSConnects(); len(c) != 1 {
			t.Fatalf("the proxy was asked for a denied destination: %v", c)
		}
	})
	t.Run("a flow to an address an allowed name resolved to asks the proxy for the name", func(t *testing.T) {
		in.SetName("web.test", in.Addr)
		p := network.Policy{AllowInternet: false, AllowHosts: []string{"web.test"}, EgressProxy: proxy}
		if err := m.Update(context.Background(), "sb-proxied", p); err != nil {
			t.Fatal(err)
		}
		if got, _ := lookup(t, a, "web.test"); got != in.Addr {
			t.Fatalf("web.test = %v", got)
		}
		if _, err := get(a.Netns, in.URL("http", "/")); err != nil {
			t.Fatal(err)
		}
		if c := in.SOCKSConnects(); c[len(c)-1] != "web.test:80" {
			t.Fatalf("the proxy was asked for %v, want web.test:80 last", c)
		}
	})
	t.Run("a wrong password fails closed", func(t *testing.T) {
		bad := *proxy
		bad.Password = "wrong"
		if err := m.Update(context.Background(), "sb-proxied", network.Policy{AllowInternet: true, EgressProxy: &bad}); err != nil {
			t.Fatal(err)
		}
		before := len(in.Requests())
		if _, err := get(a.Netns, other); err == nil {
			t.Fatal("the request went through with a password the proxy refuses")
		}
		if len(in.Requests()) != before {
			t.Fatal("the request reached the host without the proxy")
		}
	})
	t.Run("with the proxy down, nothing goes out direct", func(t *testing.T) {
		if err := m.Update(context.Background(), "sb-proxied", network.Policy{AllowInternet: true, EgressProxy: proxy}); err != nil {
			t.Fatal(err)
		}
		stopSOCKS()
		before := len(in.Requests())
		if _, err := get(a.Netns, other); err == nil {
			t.Fatal("the request went through with the proxy down")
		}
		if len(in.Requests()) != before {
			t.Fatal("the request reached the host without the proxy")
		}
	})
	t.Run("without the proxy the sandbox goes direct again", func(t *testing.T) {
		if err := m.Update(context.Background(), "sb-proxied", network.Policy{AllowInternet: true}); err != nil {
			t.Fatal(err)
		}
		if _, err := get(a.Netns, other); err != nil {
			t.Fatal(err)
		}
	})
}

func TestEgressProxyAddresses(t *testing.T) {
	in := nettest.New(t)
	srv := nettest.ReserveServer(t)
	m, err := network.New(context.Background(), network.Config{Pool: srv.Pool, Table: srv.Table, LinkPrefix: srv.LinkPrefix,
		LogGroup: srv.LogGroup, DNS: []netip.AddrPort{in.DNS()}, EgressLimit: []netip.Prefix{nettest.Range}, Warm: -1,
		StateDir: t.TempDir(), ForbidPrivateProxies: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	for _, addr := range []string{"10.1.2.3:1080", "127.0.0.1:1080", "192.168.0.9:1080"} {
		t.Run("a proxy at "+addr+" is refused when the operator forbids private ranges", func(t *testing.T) {
			p := network.Policy{AllowInternet: true, EgressProxy: &network.EgressProxy{Address: addr}}
			if _, err := m.Attach(context.Background(), "sb-"+addr, p); !errors.Is(err, network.ErrInvalid) || !strings.Contains(err.Error(), "network.egressProxy.address") {
				t.Fatalf("attach: %v, want ErrInvalid naming network.egressProxy.address", err)
			}
		})
	}
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
	rules := []network.Transform{{Pattern: "web.test", Headers: map[string]string{"Authorization": secret}}}
	a := attach(t, m, "sb-rules", network.Policy{AllowInternet: true, Transforms: rules})
	closed := attach(t, m, "sb-rules-closed", network.Policy{AllowInternet: false, Transforms: rules})
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

func TestLinkLocalIsRefusedUnlessAllowed(t *testing.T) {
	in := nettest.New(t)
	if err := in.ServeMetadata(); err != nil {
		t.Fatal(err)
	}
	denied := make(chan network.Denied, 100)
	srv := nettest.ReserveServer(t)
	// The limit lets the metadata address through, so the sandbox's own rules decide; its
	// route leads to the fake internet either way.
	m, err := network.New(context.Background(), network.Config{Pool: srv.Pool, Table: srv.Table, LinkPrefix: srv.LinkPrefix,
		LogGroup: srv.LogGroup, DNS: []netip.AddrPort{in.DNS()}, Warm: -1, StateDir: t.TempDir(),
		EgressLimit: []netip.Prefix{nettest.Range, netip.PrefixFrom(nettest.Metadata, 32)},
		OnDenied:    func(_ context.Context, d network.Denied) { denied <- d }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	url := "http://" + nettest.Metadata.String() + "/latest/meta-data/"
	t.Run("a sandbox with internet access does not reach the metadata address", func(t *testing.T) {
		a := attach(t, m, "sb-ll", network.Policy{AllowInternet: true})
		if body, err := get(a.Netns, url); err == nil {
			t.Fatalf("reached it: %q", body)
		}
		select {
		case d := <-denied:
			if d.Kind != network.DenyLinkLocal || d.Rule != "link-local 169.254.0.0/16" {
				t.Fatalf("refused by %+v, want the link-local rule", d)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("no denied connection reported")
		}
	})
	t.Run("an allowOut entry for it opens it", func(t *testing.T) {
		a := attach(t, m, "sb-ll-allowed", network.Policy{AllowInternet: true, AllowOut: []netip.Prefix{netip.PrefixFrom(nettest.Metadata, 32)}})
		if body, err := get(a.Netns, url); err != nil || !strings.Contains(body, "metadata") {
			t.Fatalf("%q, %v", body, err)
		}
	})
}
