package network_test

import (
	"encoding/binary"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/internal/network"
	"github.com/cove-dev/cove/internal/network/nettest"
)

// TestDNSIsNoWayOutWithoutInternet: a query is itself a message out (a name under an
// attacker's zone reaches the attacker's name server), so a sandbox without internet access
// gets answers for its allowed hostnames only; every other query is refused before it goes
// upstream, and reported.
func TestDNSIsNoWayOutWithoutInternet(t *testing.T) {
	in := nettest.New(t)
	in.SetName("web.test", in.Addr)
	in.SetName("open.leak.test", in.Other)
	m, denied := startManager(t, in, nil)
	everything := []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}
	halves := []netip.Prefix{netip.MustParsePrefix("0.0.0.0/1"), netip.MustParsePrefix("128.0.0.0/1")}
	n := 0
	for _, tc := range []struct {
		name string
		p    network.Policy
		kind network.DenyKind
		rule string
	}{
		{"allowInternetAccess false", network.Policy{AllowInternet: false, AllowHosts: []string{"web.test"}}, network.DenyNoNet, "allowInternetAccess false"},
		{"denyOut 0.0.0.0/0", network.Policy{AllowInternet: true, DenyOut: everything, AllowHosts: []string{"web.test"}}, network.DenyOut, "denyOut 0.0.0.0/0"},
		{"denyOut entries that together cover every address", network.Policy{AllowInternet: true, DenyOut: halves, AllowHosts: []string{"web.test"}}, network.DenyOut, "denyOut 0.0.0.0/1, 128.0.0.0/1"},
	} {
		t.Run("a sandbox with "+tc.name+" sends no other query upstream", func(t *testing.T) {
			n++
			id := "sb-dns-" + string(rune('a'+n))
			a := attach(t, m, id, tc.p)
			if got, _ := lookup(t, a, "web.test"); got != in.Addr {
				t.Fatalf("the allowed name web.test = %v, want %v", got, in.Addr)
			}
			secret := "c2VjcmV0-" + string(rune('a'+n)) + ".leak.test"
			if got, rcode := lookup(t, a, secret); got.IsValid() || rcode != dnsmessage.RCodeRefused {
				t.Fatalf("%s = %v (%v), want REFUSED", secret, got, rcode)
			}
			if slices.Contains(in.Queries(), secret) {
				t.Fatalf("the upstream was asked for %s", secret)
			}
			d := waitDenied(t, denied, id, func(d network.Denied) bool { return strings.Contains(d.Rule, secret) })
			if d.Kind != tc.kind || !strings.HasPrefix(d.Rule, tc.rule+" ") || d.Dst != netip.AddrPortFrom(a.Gateway, 53) {
				t.Fatalf("reported %+v, want kind %s, rule %q, destination %s:53", d, tc.kind, tc.rule, a.Gateway)
			}
		})
	}
	t.Run("a sandbox with internet access resolves any name (the test can fail)", func(t *testing.T) {
		a := attach(t, m, "sb-dns-open", network.Policy{AllowInternet: true, DenyOut: halves[:1]})
		if got, _ := lookup(t, a, "open.leak.test"); got != in.Other {
			t.Fatalf("open.leak.test = %v, want %v", got, in.Other)
		}
		if !slices.Contains(in.Queries(), "open.leak.test") {
			t.Fatal("the upstream was not asked")
		}
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
	udp := binary.BigEndian.AppendUint16(nil, 40000)
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
	m, _ := startManager(t, in, nil)
	closed := attach(t, m, "sb-spoof-closed", network.Policy{AllowInternet: false})
	open := attach(t, m, "sb-spoof-open", network.Policy{AllowInternet: true})
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
