package egress

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/cove-dev/cove/internal/observe/telemetry"
)

// resolver is the DNS server every sandbox's queries are redirected to (whatever address
// they were sent to). It forwards them to the configured upstreams, and answers REFUSED when
// there are none, so a sandbox's names never resolve through anything the operator did not
// choose, or when permit says no: a query is itself a message out, which a sandbox without
// internet access may send only for its allowed hostnames.
type resolver struct {
	upstreams []netip.AddrPort
	udp       net.PacketConn
	tcp       net.Listener
	logger    *slog.Logger
	// learn sees every upstream answer before the asker does (hostname rules).
	learn func(from netip.Addr, answer []byte)
	// permit decides whether from's query for name (over proto, udp or tcp) goes upstream.
	permit func(from netip.Addr, name, proto string) bool
	wg     sync.WaitGroup

	cmu   sync.Mutex
	cache map[string]lookup // lookupA's answers, by name, for their TTL
}

// lookup is one answer of lookupA, kept until its records' smallest TTL ends.
type lookup struct {
	addrs []answered
	until time.Time
}

// listenResolver binds UDP and TCP on one free port of every host address.
func listenResolver(upstreams []netip.AddrPort, logger *slog.Logger, learn func(netip.Addr, []byte), permit func(netip.Addr, string, string) bool) (*resolver, error) {
	var lastErr error
	for range 20 {
		udp, err := net.ListenPacket("udp4", "0.0.0.0:0")
		if err != nil {
			return nil, fmt.Errorf("resolver: %w", err)
		}
		port := udp.LocalAddr().(*net.UDPAddr).Port
		tcp, err := net.Listen("tcp4", fmt.Sprintf("0.0.0.0:%d", port))
		if err != nil {
			udp.Close()
			lastErr = err
			continue
		}
		r := &resolver{upstreams: upstreams, udp: udp, tcp: tcp, logger: logger, learn: learn, permit: permit, cache: map[string]lookup{}}
		r.wg.Add(2)
		go r.serveUDP()
		go r.serveTCP()
		return r, nil
	}
	return nil, fmt.Errorf("resolver: no port free for both UDP and TCP: %w", lastErr)
}

func (r *resolver) port() int { return r.udp.LocalAddr().(*net.UDPAddr).Port }

func (r *resolver) close() {
	r.udp.Close()
	r.tcp.Close()
	r.wg.Wait()
}

func (r *resolver) serveUDP() {
	defer r.wg.Done()
	buf := make([]byte, 65535)
	for {
		n, from, err := r.udp.ReadFrom(buf)
		if err != nil {
			return
		}
		q := append([]byte(nil), buf[:n]...)
		go func() {
			if ans := r.answer(q, "udp", from.(*net.UDPAddr).AddrPort().Addr().Unmap()); ans != nil {
				_, _ = r.udp.WriteTo(ans, from)
			}
		}()
	}
}

func (r *resolver) serveTCP() {
	defer r.wg.Done()
	for {
		c, err := r.tcp.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			for {
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				q, err := readTCPMessage(c)
				if err != nil {
					return
				}
				ans := r.answer(q, "tcp", c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap())
				if ans == nil || writeTCPMessage(c, ans) != nil {
					return
				}
			}
		}()
	}
}

// answer forwards query q to the upstreams in turn; nil drops a query that is not DNS.
func (r *resolver) answer(q []byte, network string, from netip.Addr) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(q)
	if err != nil || h.Response {
		return nil
	}
	question, err := p.Question()
	if err != nil {
		return nil
	}
	if !r.permit(from, question.Name.String(), network) {
		return reply(h, question, dnsmessage.RCodeRefused)
	}
	for _, up := range r.upstreams {
		ans, err := exchange(up, q, network)
		if err == nil {
			r.learn(from, ans)
			return ans
		}
		r.logger.Debug("resolver upstream failed", telemetry.KeyDNSUpstream, up.String(), telemetry.KeyError, err.Error())
	}
	rcode := dnsmessage.RCodeServerFailure
	if len(r.upstreams) == 0 {
		rcode = dnsmessage.RCodeRefused
	}
	return reply(h, question, rcode)
}

func reply(h dnsmessage.Header, q dnsmessage.Question, rcode dnsmessage.RCode) []byte {
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, OpCode: h.OpCode,
		RecursionDesired: h.RecursionDesired, RecursionAvailable: true, RCode: rcode})
	_ = b.StartQuestions()
	_ = b.Question(q)
	out, _ := b.Finish()
	return out
}

func exchange(up netip.AddrPort, q []byte, network string) ([]byte, error) {
	c, err := net.DialTimeout(network, up.String(), 2*time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	if network == "tcp" {
		if err := writeTCPMessage(c, q); err != nil {
			return nil, err
		}
		return readTCPMessage(c)
	}
	if _, err := c.Write(q); err != nil {
		return nil, err
	}
	buf := make([]byte, 65535)
	n, err := c.Read(buf)
	if err != nil {
		return nil, err
	}
	if n < 2 || buf[0] != q[0] || buf[1] != q[1] {
		return nil, errors.New("answer id does not match")
	}
	return buf[:n], nil
}

func readTCPMessage(c io.Reader) ([]byte, error) {
	var l [2]byte
	if _, err := io.ReadFull(c, l[:]); err != nil {
		return nil, err
	}
	b := make([]byte, binary.BigEndian.Uint16(l[:]))
	_, err := io.ReadFull(c, b)
	return b, err
}

func writeTCPMessage(c io.Writer, m []byte) error {
	b := make([]byte, 2+len(m))
	binary.BigEndian.PutUint16(b, uint16(len(m)))
	copy(b[2:], m)
	_, err := c.Write(b)
	return err
}

// HostResolvers reads the nameservers of a resolv.conf (IPv4, port 53). A loopback one
// (a local caching resolver) works: the resolver runs on the host.
func HostResolvers(conf []byte) []netip.AddrPort {
	var out []netip.AddrPort
	for _, line := range strings.Split(string(conf), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "nameserver" {
			if a, err := netip.ParseAddr(f[1]); err == nil && a.Is4() {
				out = append(out, netip.AddrPortFrom(a, 53))
			}
		}
	}
	return out
}

// answered is one address record of an answer: the address and the record's own name.
type answered struct {
	addr netip.Addr
	name string // lower-case, without the final dot
}

// maxLookups bounds lookupA's cache; maxLookupTTL how long it keeps an answer.
const (
	maxLookups   = 4096
	maxLookupTTL = 60 * time.Second
)

// lookupA asks the upstreams for name's IPv4 addresses, following the CNAMEs of the answer:
// Cove's own lookup of a header rule's host, whose answer is the only place the rule's
// values may go. An answer is kept for its TTL (at most a minute).
func (r *resolver) lookupA(name string) ([]answered, error) {
	now := time.Now()
	r.cmu.Lock()
	l, ok := r.cache[name]
	r.cmu.Unlock()
	if ok && now.Before(l.until) {
		return slices.Clone(l.addrs), nil
	}
	addrs, ttl, err := r.askA(name)
	if err != nil || ttl <= 0 {
		return addrs, err
	}
	r.cmu.Lock()
	defer r.cmu.Unlock()
	if len(r.cache) >= maxLookups {
		for k, l := range r.cache {
			if !now.Before(l.until) {
				delete(r.cache, k)
			}
		}
		if len(r.cache) >= maxLookups {
			clear(r.cache)
		}
	}
	r.cache[name] = lookup{addrs: slices.Clone(addrs), until: now.Add(min(ttl, maxLookupTTL))}
	return addrs, nil
}

// askA is lookupA's query to the upstreams: the addresses and the smallest TTL of the
// records that led to them.
func (r *resolver) askA(name string) ([]answered, time.Duration, error) {
	if len(r.upstreams) == 0 {
		return nil, 0, errors.New("the server has no upstream resolver (--network-dns none)")
	}
	qname, err := dnsmessage.NewName(strings.TrimSuffix(name, ".") + ".")
	if err != nil {
		return nil, 0, fmt.Errorf("%q is not a DNS name", name)
	}
	var id [2]byte
	_, _ = rand.Read(id[:])
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: binary.BigEndian.Uint16(id[:]), RecursionDesired: true})
	_ = b.StartQuestions()
	_ = b.Question(dnsmessage.Question{Name: qname, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET})
	q, err := b.Finish()
	if err != nil {
		return nil, 0, err
	}
	var errs []error
	for _, up := range r.upstreams {
		ans, err := exchange(up, q, "udp")
		if err != nil {
			errs = append(errs, err)
			continue
		}
		return addressesOf(qname, ans)
	}
	return nil, 0, fmt.Errorf("no upstream resolver answered: %w", errors.Join(errs...))
}

// addressesOf reads the A records of answer that belong to qname, directly or through the
// answer's CNAMEs, and the smallest TTL of the records that led to them.
func addressesOf(qname dnsmessage.Name, answer []byte) ([]answered, time.Duration, error) {
	var p dnsmessage.Parser
	h, err := p.Start(answer)
	if err != nil {
		return nil, 0, err
	}
	if h.RCode != dnsmessage.RCodeSuccess {
		return nil, 0, fmt.Errorf("the resolver answered %s", h.RCode)
	}
	if err := p.SkipAllQuestions(); err != nil {
		return nil, 0, err
	}
	rrs, err := p.AllAnswers()
	if err != nil {
		return nil, 0, err
	}
	owners := map[string]bool{strings.ToLower(qname.String()): true}
	for range rrs { // a chain of n CNAMEs in any order takes at most n passes
		for _, rr := range rrs {
			if c, ok := rr.Body.(*dnsmessage.CNAMEResource); ok && owners[strings.ToLower(rr.Header.Name.String())] {
				owners[strings.ToLower(c.CNAME.String())] = true
			}
		}
	}
	var out []answered
	ttl := maxLookupTTL
	for _, rr := range rrs {
		a, isA := rr.Body.(*dnsmessage.AResource)
		_, isCNAME := rr.Body.(*dnsmessage.CNAMEResource)
		if !owners[strings.ToLower(rr.Header.Name.String())] || !isA && !isCNAME {
			continue
		}
		ttl = min(ttl, time.Duration(rr.Header.TTL)*time.Second)
		if isA {
			out = append(out, answered{netip.AddrFrom4(a.A), strings.TrimSuffix(strings.ToLower(rr.Header.Name.String()), ".")})
		}
	}
	if len(out) == 0 {
		return nil, 0, errors.New("no address record")
	}
	return out, ttl, nil
}
