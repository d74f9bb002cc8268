// Package nettest builds a fake internet for tests: a network namespace joined to the host by
// a veth, with addresses in 198.18.0.0/15 (the benchmarking range, never routed on the real
// internet), running an HTTP server, an HTTPS server (its own CA) and a DNS server for a test
// zone. Tests send traffic only there, so nothing ever leaves the machine.
//
// Each Internet takes its own /24, 198.18.N.0/24 (N from 1 to 254), reserved with a lock file
// so tests in parallel processes never share one; the host reaches it through the veth
// cvi<N>, whose address is 198.18.N.1; the namespace has 198.18.N.2 and up.
package nettest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
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
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/net/dns/dnsmessage"
	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/internal/sandbox/runtime"
)

// Range is every address a test may send traffic to.
var Range = netip.MustParsePrefix("198.18.0.0/15")

// Internet is a fake internet: one namespace, several addresses, servers on them.
type Internet struct {
	// Subnet is this internet's /24 inside 198.18.0.0/16.
	Subnet netip.Prefix
	// Gateway is the host's end of the veth (198.18.N.1).
	Gateway netip.Addr
	// Addr is the web host's address (198.18.N.2): HTTP on 80, HTTPS on 443, DNS on 53.
	Addr netip.Addr
	// Other is a second host (198.18.N.3) serving the same HTTP, for rules that tell two
	// destinations apart.
	Other netip.Addr
	// Netns is the namespace's pinned path.
	Netns string
	// CAPEM is the PEM certificate of the CA that signed the HTTPS server's certificate.
	CAPEM []byte
	// Link is the host end of the veth.
	Link string

	closers []func() // run in reverse by Close

	mu       sync.Mutex
	zone     map[string]netip.Addr
	cnames   map[string]string
	socks    []string
	requests []Request
	queries  []string
}

// Request is one request a server of the internet saw.
type Request struct {
	Host, Path, RemoteAddr string
	// LocalAddr is the server's address the request came to (ip:port).
	LocalAddr string
	Header    http.Header
	TLS       bool
	At        time.Time
}

// Skip skips t unless the process may build namespaces, veths and nftables tables.
func Skip(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: builds network namespaces and veths")
	}
	if _, err := exec.LookPath("nft"); err != nil {
		t.Skip("needs the nft binary (Debian package nftables; scripts/deps.sh installs it)")
	}
}

// New builds an internet and removes it when t ends.
func New(t testing.TB) *Internet {
	t.Helper()
	Skip(t)
	in, err := Build()
	if err != nil {
		t.Fatalf("nettest: %v", err)
	}
	t.Cleanup(in.Close)
	return in
}

// Build builds an internet for callers without a testing.TB (benchmark programs); Close
// removes it. It needs root.
func Build() (_ *Internet, err error) {
	n, unlock, err := reserve()
	if err != nil {
		return nil, err
	}
	in := &Internet{
		Subnet:  netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, byte(n), 0}), 24),
		Gateway: netip.AddrFrom4([4]byte{198, 18, byte(n), 1}),
		Addr:    netip.AddrFrom4([4]byte{198, 18, byte(n), 2}),
		Other:   netip.AddrFrom4([4]byte{198, 18, byte(n), 3}),
		Netns:   filepath.Join(os.TempDir(), fmt.Sprintf("cove-nettest-%d.netns", n)),
		Link:    fmt.Sprintf("cvi%d", n),
		zone:    map[string]netip.Addr{},
		cnames:  map[string]string{},
		closers: []func(){unlock},
	}
	defer func() {
		if err != nil {
			in.Close()
		}
	}()
	// A test killed half-way leaves these behind; the lock says nobody else holds them.
	in.remove()
	in.closers = append(in.closers, in.remove)
	if err := in.build(); err != nil {
		return nil, err
	}
	if err := in.serve(); err != nil {
		return nil, err
	}
	return in, nil
}

// Close stops the servers and removes the namespace and the veth.
func (in *Internet) Close() {
	for i := len(in.closers) - 1; i >= 0; i-- {
		in.closers[i]()
	}
	in.closers = nil
}

// reserve takes the first free /24 number with an exclusive lock file.
func reserve() (int, func(), error) {
	dir := filepath.Join(os.TempDir(), "cove-nettest")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, nil, err
	}
	for n := 1; n < 255; n++ {
		f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("%d.lock", n)), os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			return 0, nil, err
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			continue
		}
		return n, func() { f.Close() }, nil
	}
	return 0, nil, errors.New("all 254 test internets are in use")
}

func (in *Internet) build() error {
	if err := runtime.CreateNetns(in.Netns); err != nil {
		return err
	}
	ns, err := netns.GetFromPath(in.Netns)
	if err != nil {
		return err
	}
	defer ns.Close()
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: in.Link}, PeerName: "eth0", PeerNamespace: netlink.NsFd(int(ns))}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("add veth %s: %w", in.Link, err)
	}
	host, err := netlink.LinkByName(in.Link)
	if err != nil {
		return err
	}
	_ = os.WriteFile("/proc/sys/net/ipv6/conf/"+in.Link+"/disable_ipv6", []byte("1"), 0)
	// Replies to sandboxes come back through this link: it forwards, the uplink does not.
	if err := os.WriteFile("/proc/sys/net/ipv4/conf/"+in.Link+"/forwarding", []byte("1"), 0); err != nil {
		return err
	}
	if err := netlink.AddrAdd(host, &netlink.Addr{IPNet: prefixNet(in.Gateway, 24)}); err != nil {
		return err
	}
	if err := netlink.LinkSetUp(host); err != nil {
		return err
	}
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	eth0, err := h.LinkByName("eth0")
	if err != nil {
		return err
	}
	for _, a := range []netip.Addr{in.Addr, in.Other} {
		if err := h.AddrAdd(eth0, &netlink.Addr{IPNet: prefixNet(a, 24)}); err != nil {
			return err
		}
	}
	if err := h.LinkSetUp(eth0); err != nil {
		return err
	}
	// Answers to anything in 198.18.0.0/15 go back through the host.
	return h.RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Dst: prefixNet(Range.Addr(), 15), Gw: in.Gateway.AsSlice()})
}

func (in *Internet) remove() {
	if l, err := netlink.LinkByName(in.Link); err == nil {
		_ = netlink.LinkDel(l)
	}
	_ = runtime.RemoveNetns(in.Netns)
}

func prefixNet(a netip.Addr, bits int) *net.IPNet {
	return &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(bits, 32)}
}

// serve starts the HTTP servers on both hosts, HTTPS on the web host and DNS.
func (in *Internet) serve() error {
	cert, caPEM, err := selfCA(in.Addr)
	if err != nil {
		return err
	}
	in.CAPEM = caPEM
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in.mu.Lock()
		local := ""
		if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
			local = a.String()
		}
		in.requests = append(in.requests, Request{Host: r.Host, Path: r.URL.Path, RemoteAddr: r.RemoteAddr, LocalAddr: local,
			Header: r.Header.Clone(), TLS: r.TLS != nil, At: time.Now()})
		in.mu.Unlock()
		if r.URL.Path == "/sink" { // throughput: read everything
			n, _ := io.Copy(io.Discard, r.Body)
			fmt.Fprintf(w, "%d\n", n)
			return
		}
		fmt.Fprintf(w, "hello from %s\n", r.Host)
	})
	listen := func(network, addr string) (net.Listener, error) { return ListenIn(in.Netns, network, addr) }
	for _, addr := range []string{net.JoinHostPort(in.Addr.String(), "80"), net.JoinHostPort(in.Other.String(), "80")} {
		l, err := listen("tcp", addr)
		if err != nil {
			return err
		}
		srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
		go srv.Serve(l)
		in.closers = append(in.closers, func() { srv.Close() })
	}
	l, err := listen("tcp", net.JoinHostPort(in.Addr.String(), "443"))
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}}
	go srv.ServeTLS(l, "", "")
	in.closers = append(in.closers, func() { srv.Close() })
	// A raw TCP sink for throughput: reads and discards until EOF.
	sink, err := listen("tcp", net.JoinHostPort(in.Addr.String(), "9000"))
	if err != nil {
		return err
	}
	in.closers = append(in.closers, func() { sink.Close() })
	go func() {
		for {
			c, err := sink.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(io.Discard, c) }()
		}
	}()
	pc, err := ListenPacketIn(in.Netns, "udp", net.JoinHostPort(in.Addr.String(), "53"))
	if err != nil {
		return err
	}
	in.closers = append(in.closers, func() { pc.Close() })
	go in.serveDNS(pc)
	return nil
}

// Requests returns what the servers have seen so far.
func (in *Internet) Requests() []Request {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]Request(nil), in.requests...)
}

// Queries lists the names the DNS server was asked for, lower-case, without the final dot.
func (in *Internet) Queries() []string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]string(nil), in.queries...)
}

// SetName makes the DNS server answer name (a fully qualified name without the final dot)
// with addr.
func (in *Internet) SetName(name string, addr netip.Addr) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.zone[strings.ToLower(strings.TrimSuffix(name, "."))] = addr
}

// SetCNAME makes the DNS server answer name with a CNAME to target, followed by target's
// address record when it has one.
func (in *Internet) SetCNAME(name, target string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.cnames[strings.ToLower(strings.TrimSuffix(name, "."))] = strings.ToLower(strings.TrimSuffix(target, "."))
}

// DNS is the address of the internet's DNS server.
func (in *Internet) DNS() netip.AddrPort { return netip.AddrPortFrom(in.Addr, 53) }

// URL is http://<addr><path> (or https).
func (in *Internet) URL(scheme, path string) string { return scheme + "://" + in.Addr.String() + path }

func (in *Internet) serveDNS(pc net.PacketConn) {
	buf := make([]byte, 1500)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		if ans := in.answerDNS(buf[:n]); ans != nil {
			_, _ = pc.WriteTo(ans, from)
		}
	}
}

func (in *Internet) answerDNS(q []byte) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(q)
	if err != nil {
		return nil
	}
	question, err := p.Question()
	if err != nil {
		return nil
	}
	name := strings.ToLower(strings.TrimSuffix(question.Name.String(), "."))
	owner := question.Name
	in.mu.Lock()
	in.queries = append(in.queries, name)
	target, isAlias := in.cnames[name]
	if isAlias {
		name = target
	}
	addr, ok := in.zone[name]
	in.mu.Unlock()
	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired}
	if !ok && !isAlias {
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, rh)
	_ = b.StartQuestions()
	_ = b.Question(question)
	_ = b.StartAnswers()
	if isAlias {
		t := dnsmessage.MustNewName(target + ".")
		_ = b.CNAMEResource(dnsmessage.ResourceHeader{Name: owner, Class: dnsmessage.ClassINET, TTL: 5}, dnsmessage.CNAMEResource{CNAME: t})
		owner = t
	}
	if ok && question.Type == dnsmessage.TypeA {
		_ = b.AResource(dnsmessage.ResourceHeader{Name: owner, Class: dnsmessage.ClassINET, TTL: 5},
			dnsmessage.AResource{A: addr.As4()})
	}
	out, err := b.Finish()
	if err != nil {
		return nil
	}
	return out
}

// selfCA makes a CA and a certificate for addr signed by it.
func selfCA(addr netip.Addr) (tls.Certificate, []byte, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "cove nettest CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	ca, _ = x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: addr.String()},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{addr.AsSlice()}, DNSNames: []string{"web.test"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key},
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), nil
}

// ListenIn opens a listener inside the network namespace pinned at path.
func ListenIn(path, network, addr string) (net.Listener, error) {
	var l net.Listener
	err := InNetns(path, func() (err error) { l, err = net.Listen(network, addr); return err })
	return l, err
}

// ListenPacketIn opens a packet listener inside the network namespace pinned at path.
func ListenPacketIn(path, network, addr string) (net.PacketConn, error) {
	var pc net.PacketConn
	err := InNetns(path, func() (err error) { pc, err = net.ListenPacket(network, addr); return err })
	return pc, err
}

// DialIn dials from inside the network namespace pinned at path (IP addresses only).
func DialIn(ctx context.Context, path, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := InNetns(path, func() (err error) {
		var d net.Dialer
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// Get fetches url from inside the namespace pinned at netns; the error says why it could not.
func Get(netns, url string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return DialIn(ctx, netns, network, addr)
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

// Lookup asks, from inside the namespace pinned at netns, the resolver its resolv.conf
// names for name's A record: the first address of the answer (none when it has none) and
// its code.
func Lookup(t testing.TB, netns, resolvConf, name string) (netip.Addr, dnsmessage.RCode) {
	t.Helper()
	conf, err := os.ReadFile(resolvConf)
	if err != nil {
		t.Fatal(err)
	}
	server := strings.TrimSpace(strings.TrimPrefix(string(conf), "nameserver"))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := DialIn(ctx, netns, "udp", net.JoinHostPort(server, "53"))
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

// InNetns runs f on a locked thread inside the namespace pinned at path. Sockets f opens stay
// in that namespace.
func InNetns(path string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		goruntime.LockOSThread()
		self, err := netns.Get()
		if err != nil {
			errc <- err
			return
		}
		defer self.Close()
		target, err := netns.GetFromPath(path)
		if err != nil {
			errc <- err
			return
		}
		defer target.Close()
		if err := netns.Set(target); err != nil {
			errc <- fmt.Errorf("enter netns %s: %w", path, err)
			return
		}
		ferr := f()
		if err := netns.Set(self); err != nil {
			errc <- errors.Join(ferr, err) // the thread stays locked and dies with this goroutine
			return
		}
		goruntime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// Server is what a test server (cove server or network.Manager) needs to own sandbox
// networking without meeting another test's: its own /24 of 198.19.0.0/16, nftables table
// and link prefix, reserved with a lock file for as long as the test runs.
type Server struct {
	Pool       netip.Prefix // 198.19.N.0/24
	Table      string       // covetest_N
	LinkPrefix string       // ct<N in hex>
	LogGroup   uint16       // 2000+N: the nflog group of refused packets
}

// ReserveServer reserves a Server's names and pool until t ends.
func ReserveServer(t testing.TB) Server {
	t.Helper()
	s, release, err := ReservePool()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release)
	return s
}

// ReservePool reserves a Server's names and pool until release is called (or the process
// ends), for callers without a testing.TB (a TestMain).
func ReservePool() (Server, func(), error) {
	dir := filepath.Join(os.TempDir(), "cove-nettest-pools")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Server{}, nil, err
	}
	for n := range 256 {
		f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("%d.lock", n)), os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			return Server{}, nil, err
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			continue
		}
		return Server{
			Pool:       netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 19, byte(n), 0}), 24),
			Table:      fmt.Sprintf("covetest_%d", n),
			LinkPrefix: fmt.Sprintf("ct%x", n),
			LogGroup:   uint16(2000 + n),
		}, func() { f.Close() }, nil
	}
	return Server{}, nil, errors.New("nettest: all 256 test pools are in use")
}

// The SOCKS5 server's credentials (RFC 1929); it refuses any other.
const (
	SOCKSUser     = "cove"
	SOCKSPassword = "s3cret-proxy-pw"
)

// StartSOCKS runs a SOCKS5 server (CONNECT only, username and password required) on the web
// host, port 1080, until stop is called or the internet closes. Its dials leave from the web
// host's address.
func (in *Internet) StartSOCKS() (addr netip.AddrPort, stop func(), err error) {
	addr = netip.AddrPortFrom(in.Addr, 1080)
	ln, err := ListenIn(in.Netns, "tcp", addr.String())
	if err != nil {
		return addr, nil, err
	}
	var once sync.Once
	stop = func() { once.Do(func() { ln.Close() }) }
	in.closers = append(in.closers, stop)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go in.serveSOCKS(c)
		}
	}()
	return addr, stop, nil
}

// SOCKSConnects lists the destinations the SOCKS5 server was asked for: address:port, or
// name:port when the client sent a name (ATYP=domain).
func (in *Internet) SOCKSConnects() []string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]string(nil), in.socks...)
}

func (in *Internet) serveSOCKS(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	hdr := make([]byte, 2)
	if _, err := io.ReadFull(c, hdr); err != nil || hdr[0] != 5 {
		return
	}
	methods := make([]byte, hdr[1])
	if _, err := io.ReadFull(c, methods); err != nil || !slices.Contains(methods, 2) {
		c.Write([]byte{5, 0xff})
		return
	}
	c.Write([]byte{5, 2})
	var ver, ulen [1]byte
	io.ReadFull(c, ver[:])
	io.ReadFull(c, ulen[:])
	user := make([]byte, ulen[0])
	io.ReadFull(c, user)
	var plen [1]byte
	io.ReadFull(c, plen[:])
	pass := make([]byte, plen[0])
	io.ReadFull(c, pass)
	if string(user) != SOCKSUser || string(pass) != SOCKSPassword {
		c.Write([]byte{1, 1})
		return
	}
	c.Write([]byte{1, 0})
	req := make([]byte, 4)
	if _, err := io.ReadFull(c, req); err != nil || req[1] != 1 {
		return
	}
	var dst netip.AddrPort
	var asked string
	switch req[3] {
	case 1: // IPv4
		b := make([]byte, 6)
		if _, err := io.ReadFull(c, b); err != nil {
			return
		}
		dst = netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[:4])), uint16(b[4])<<8|uint16(b[5]))
		asked = dst.String()
	case 3: // a name, resolved here in the test zone (remote DNS)
		var l [1]byte
		if _, err := io.ReadFull(c, l[:]); err != nil {
			return
		}
		b := make([]byte, int(l[0])+2)
		if _, err := io.ReadFull(c, b); err != nil {
			return
		}
		name, port := string(b[:l[0]]), uint16(b[l[0]])<<8|uint16(b[l[0]+1])
		in.mu.Lock()
		addr, ok := in.zone[strings.ToLower(name)]
		in.mu.Unlock()
		if !ok {
			c.Write([]byte{5, 4, 0, 1, 0, 0, 0, 0, 0, 0})
			return
		}
		dst, asked = netip.AddrPortFrom(addr, port), fmt.Sprintf("%s:%d", name, port)
	default:
		return
	}
	in.mu.Lock()
	in.socks = append(in.socks, asked)
	in.mu.Unlock()
	up, err := DialIn(context.Background(), in.Netns, "tcp", dst.String())
	if err != nil {
		c.Write([]byte{5, 5, 0, 1, 0, 0, 0, 0, 0, 0})
		return
	}
	defer up.Close()
	c.Write([]byte{5, 0, 0, 1, 0, 0, 0, 0, 0, 0})
	_ = c.SetDeadline(time.Time{})
	done := make(chan struct{}, 2)
	go func() { io.Copy(up, c); up.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
	go func() { io.Copy(c, up); c.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
	<-done
	<-done
}

// Metadata is the cloud metadata address tests use to check link-local isolation.
var Metadata = netip.MustParseAddr("169.254.169.254")

// ServeMetadata puts Metadata on the internet's web host, serving the same HTTP, and routes
// it from the host to the internet's veth, so a packet for it never leaves the machine even
// if a rule failed to stop it. The route goes with the internet.
func (in *Internet) ServeMetadata() error {
	ns, err := netns.GetFromPath(in.Netns)
	if err != nil {
		return err
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	eth0, err := h.LinkByName("eth0")
	if err != nil {
		return err
	}
	if err := h.AddrAdd(eth0, &netlink.Addr{IPNet: prefixNet(Metadata, 32)}); err != nil {
		return err
	}
	host, err := netlink.LinkByName(in.Link)
	if err != nil {
		return err
	}
	if err := netlink.RouteAdd(&netlink.Route{LinkIndex: host.Attrs().Index, Dst: prefixNet(Metadata, 32), Gw: in.Addr.AsSlice()}); err != nil {
		return fmt.Errorf("route %s to the fake internet: %w", Metadata, err)
	}
	l, err := ListenIn(in.Netns, "tcp", net.JoinHostPort(Metadata.String(), "80"))
	if err != nil {
		return err
	}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "metadata")
	})}
	go srv.Serve(l)
	in.closers = append(in.closers, func() { srv.Close() })
	return nil
}
