package network_test

import (
	"context"
	"encoding/binary"
	"fmt"
	mathrand "math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/internal/sandbox/egress"
	"github.com/cove-dev/cove/internal/sandbox/network"
	"github.com/cove-dev/cove/internal/sandbox/network/nettest"
)

// The package's tests start managers and attach sandboxes as egress's do (nettest).
var (
	newManager = nettest.Manager
	attach     = nettest.Attach
)

// lookup asks the resolver named in the sandbox's resolv.conf for name's A record.
func lookup(t *testing.T, a *network.Attachment, name string) (netip.Addr, dnsmessage.RCode) {
	t.Helper()
	return nettest.Lookup(t, a.Netns, a.ResolvConf, name)
}

func TestEgress(t *testing.T) {
	in := nettest.New(t)
	m := newManager(t, in, 1)
	on := attach(t, m, "sb-on", egress.Policy{AllowInternet: true})
	off := attach(t, m, "sb-off", egress.Policy{AllowInternet: false})

	t.Run("a sandbox with internet access reaches the test host, masqueraded", func(t *testing.T) {
		body, err := nettest.Get(on.Netns, in.URL("http", "/hello"))
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
		if body, err := nettest.Get(off.Netns, in.URL("http", "/")); err == nil {
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
		p := egress.Policy{AllowInternet: false, AllowOut: []netip.Prefix{netip.PrefixFrom(in.Other, 32)}}
		if err := m.Update(context.Background(), "sb-off", p); err != nil {
			t.Fatal(err)
		}
		if _, err := nettest.Get(off.Netns, "http://"+in.Other.String()+"/"); err != nil {
			t.Fatalf("allowed host: %v", err)
		}
		if _, err := nettest.Get(off.Netns, in.URL("http", "/")); err == nil {
			t.Fatal("a host outside allowOut answered")
		}
	})
	t.Run("allowOut wins over denyOut", func(t *testing.T) {
		p := egress.Policy{AllowInternet: true, DenyOut: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")},
			AllowOut: []netip.Prefix{netip.PrefixFrom(in.Addr, 32)}}
		if err := m.Update(context.Background(), "sb-off", p); err != nil {
			t.Fatal(err)
		}
		if _, err := nettest.Get(off.Netns, in.URL("http", "/")); err != nil {
			t.Fatalf("allowed host: %v", err)
		}
		if _, err := nettest.Get(off.Netns, "http://"+in.Other.String()+"/"); err == nil {
			t.Fatal("a denied host answered")
		}
	})
}

func TestIsolation(t *testing.T) {
	in := nettest.New(t)
	m := newManager(t, in, -1)
	a := attach(t, m, "sb-a", egress.Policy{AllowInternet: true})
	b := attach(t, m, "sb-b", egress.Policy{AllowInternet: true})

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

// spoofedQuery sends, from inside netns with a raw socket, a DNS query for name to to:53
// whose IPv4 source is src, an address that is not the sandbox's.
func spoofedQuery(t *testing.T, netns string, src, to netip.Addr, name string) {
	t.Helper()
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 9, RecursionDesired: true})
	_ = b.StartQuestions()
	_ = b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name + "."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET})
	q, _ := b.Finish()
	// A source port of its own: the conntrack entry an earlier test left for the same
	// addresses and ports would still redirect the query to that test's resolver port.
	udp := binary.BigEndian.AppendUint16(nil, uint16(40000+mathrand.IntN(20000)))
	udp = binary.BigEndian.AppendUint16(udp, 53)
	udp = binary.BigEndian.AppendUint16(udp, uint16(8+len(q)))
	udp = append(binary.BigEndian.AppendUint16(udp, 0), q...) // no UDP checksum (optional in IPv4)
	ip := []byte{0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, unix.IPPROTO_UDP, 0, 0}
	binary.BigEndian.PutUint16(ip[2:], uint16(20+len(udp)))
	ip = append(append(append(ip, src.AsSlice()...), to.AsSlice()...), udp...) // the kernel fills in the header checksum
	err := nettest.InNetns(netns, func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_RAW)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		return unix.Sendto(fd, ip, 0, &unix.SockaddrInet4{Addr: to.As4()})
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestSpoofedSourcesGetNothingFromTheHost: a sandbox (root, CAP_NET_RAW) can write any
// source address; what it sends to the host with another sandbox's address (or any other)
// must not be taken for that sandbox's: its query would otherwise go upstream under the
// other's policy.
func TestSpoofedSourcesGetNothingFromTheHost(t *testing.T) {
	in := nettest.New(t)
	m := newManager(t, in, -1)
	closed := attach(t, m, "sb-spoof-closed", egress.Policy{AllowInternet: false})
	open := attach(t, m, "sb-spoof-open", egress.Policy{AllowInternet: true})
	t.Run("a query with an online sandbox's address as its source goes nowhere", func(t *testing.T) {
		spoofedQuery(t, closed.Netns, open.Addr, closed.Gateway, "spoofed.leak.test")
		time.Sleep(time.Second) // a forwarded query reaches the upstream within milliseconds
		if slices.Contains(in.Queries(), "spoofed.leak.test") {
			t.Fatal("the upstream was asked for a name a sandbox without internet access sent")
		}
	})
	t.Run("the same raw query with the sandbox's own address goes upstream (the test can fail)", func(t *testing.T) {
		spoofedQuery(t, open.Netns, open.Addr, open.Gateway, "own.leak.test")
		deadline := time.Now().Add(5 * time.Second)
		for !slices.Contains(in.Queries(), "own.leak.test") {
			if time.Now().After(deadline) {
				t.Fatal("a raw query from the online sandbox with its own address never reached the upstream")
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
}
