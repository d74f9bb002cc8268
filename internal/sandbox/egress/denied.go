package egress

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/internal/observe/telemetry"
)

// DenyKind is which of Cove's rules refused a sandbox's packet. The set is closed.
type DenyKind string

// The deny kinds; each is also the nftables log prefix of its rule.
const (
	DenyOut       DenyKind = "deny_out"     // a denyOut entry
	DenyNoNet     DenyKind = "no_internet"  // allowInternetAccess false, and no allowOut entry matched
	DenyLinkLocal DenyKind = "link_local"   // 169.254.0.0/16, or another sandbox's address
	DenyLimit     DenyKind = "egress_limit" // the server's --network-egress-limit
	DenyHost      DenyKind = "host_service" // the host's own services
	// DenyHeaderRule: a request a header rule applies to was not sent, because its values
	// had nowhere they may go (the rule's host does not resolve) or did not resolve (a
	// secret that does not exist, an identity token the server cannot mint).
	DenyHeaderRule DenyKind = "header_rule"
	denyUnknown    DenyKind = "unknown" // String of the zero kind
)

func (k DenyKind) String() string {
	if k == "" {
		return string(denyUnknown)
	}
	return string(k)
}

// ParseDenyKind returns the kind named s; it rejects names outside the set.
func ParseDenyKind(s string) (DenyKind, error) {
	switch k := DenyKind(s); k {
	case DenyOut, DenyNoNet, DenyLinkLocal, DenyLimit, DenyHost, DenyHeaderRule:
		return k, nil
	}
	return "", fmt.Errorf("unknown deny kind %q", s)
}

// Denied is a sample of the connections one rule refused a sandbox, to one destination.
type Denied struct {
	SandboxID string
	Dst       netip.AddrPort // port 0 for protocols without ports
	Proto     string         // tcp, udp, icmp or the protocol number
	Kind      DenyKind
	// Rule says which rule in the user's words: "denyOut 0.0.0.0/0", "allowInternetAccess false".
	Rule  string
	Count int // packets seen in the window (the table logs a sample of them)
	First time.Time
}

// Sampling: the table's log rule hands Cove a few packets a second per rule of a sandbox
// (internal/sandbox/network's logRule), and Cove reports at most maxPerFlush destinations per
// sandbox every flushEvery.
const (
	flushEvery  = 2 * time.Second
	maxPerFlush = 5
)

// nflog reads the refused packets the table logs to its netlink group.
type nflog struct {
	fd   int
	stop chan struct{}
	wg   sync.WaitGroup
}

const (
	nfnlSubsysULOG      = 4
	nfulnlMsgPacket     = 0
	nfulnlMsgConfig     = 1
	nfulaCfgCmd         = 1
	nfulaCfgMode        = 2
	nfulaCfgQThresh     = 5
	nfulaTimestamp      = 3
	nfulaPayload        = 9
	nfulaPrefix         = 10
	nfulnlCfgCmdBind    = 1
	nfulnlCopyPacket    = 2
	nflogCopyRange      = 64
	nlmsgHdrLen         = 16
	nfgenHdrLen         = 4
	nlaHdrLen           = 4
	netlinkNoENOBUFS    = 5 // NETLINK_NO_ENOBUFS
	solNetlink          = 270
	netlinkNetfilterSub = unix.NETLINK_NETFILTER
)

// openNFLog binds a netlink socket to the log group.
func openNFLog(group uint16) (*nflog, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, netlinkNetfilterSub)
	if err != nil {
		return nil, fmt.Errorf("nflog socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("nflog bind: %w", err)
	}
	_ = unix.SetsockoptInt(fd, solNetlink, netlinkNoENOBUFS, 1)
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 1<<20)
	cmd := nlAttr(nfulaCfgCmd, []byte{nfulnlCfgCmdBind})
	mode := make([]byte, 6)
	binary.BigEndian.PutUint32(mode, nflogCopyRange)
	mode[4] = nfulnlCopyPacket
	// One packet per message, at once: the kernel otherwise batches for up to a second.
	qthresh := binary.BigEndian.AppendUint32(nil, 1)
	for _, attr := range [][]byte{cmd, nlAttr(nfulaCfgMode, mode), nlAttr(nfulaCfgQThresh, qthresh)} {
		if err := nfConfig(fd, group, attr); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("nflog group %d: %w (another process holds it? choose another --network-log-group)", group, err)
		}
	}
	// Reads wake up every so often to notice stop.
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 200_000})
	return &nflog{fd: fd, stop: make(chan struct{})}, nil
}

func nlAttr(typ uint16, data []byte) []byte {
	l := nlaHdrLen + len(data)
	b := make([]byte, (l+3)&^3)
	binary.NativeEndian.PutUint16(b[0:], uint16(l))
	binary.NativeEndian.PutUint16(b[2:], typ)
	copy(b[4:], data)
	return b
}

// nfConfig sends one NFULNL_MSG_CONFIG for group and waits for its ack.
func nfConfig(fd int, group uint16, attr []byte) error {
	msg := make([]byte, nlmsgHdrLen+nfgenHdrLen+len(attr))
	binary.NativeEndian.PutUint32(msg[0:], uint32(len(msg)))
	binary.NativeEndian.PutUint16(msg[4:], nfnlSubsysULOG<<8|nfulnlMsgConfig)
	binary.NativeEndian.PutUint16(msg[6:], unix.NLM_F_REQUEST|unix.NLM_F_ACK)
	binary.NativeEndian.PutUint32(msg[8:], 1)
	msg[nlmsgHdrLen] = unix.AF_UNSPEC
	binary.BigEndian.PutUint16(msg[nlmsgHdrLen+2:], group)
	copy(msg[nlmsgHdrLen+nfgenHdrLen:], attr)
	if err := unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	buf := make([]byte, 4096)
	n, _, err := unix.Recvfrom(fd, buf, 0)
	if err != nil {
		return err
	}
	if n >= nlmsgHdrLen+4 && binary.NativeEndian.Uint16(buf[4:]) == unix.NLMSG_ERROR {
		if code := int32(binary.NativeEndian.Uint32(buf[nlmsgHdrLen:])); code != 0 {
			return unix.Errno(-code)
		}
	}
	return nil
}

// loggedPacket is what one log message says.
type loggedPacket struct {
	kind     DenyKind
	src      netip.Addr
	dst      netip.AddrPort
	protocol string
	at       time.Time // when the kernel logged it
	// rule, when set, names the refusing rule instead of ruleText (Cove's own refusals).
	rule string
}

// read calls f for each logged packet until close.
func (l *nflog) read(f func(loggedPacket)) {
	defer l.wg.Done()
	buf := make([]byte, 1<<16)
	for {
		select {
		case <-l.stop:
			return
		default:
		}
		n, _, err := unix.Recvfrom(l.fd, buf, 0)
		if err != nil {
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) || errors.Is(err, unix.ENOBUFS) {
				continue
			}
			return
		}
		for b := buf[:n]; len(b) >= nlmsgHdrLen; {
			l := int(binary.NativeEndian.Uint32(b[0:]))
			if l < nlmsgHdrLen || l > len(b) {
				break
			}
			if binary.NativeEndian.Uint16(b[4:]) == nfnlSubsysULOG<<8|nfulnlMsgPacket {
				if p, ok := parseLogged(b[nlmsgHdrLen:l]); ok {
					f(p)
				}
			}
			b = b[(l+3)&^3:]
		}
	}
}

func (l *nflog) close() {
	close(l.stop)
	l.wg.Wait()
	unix.Close(l.fd)
}

// parseLogged reads the prefix and the IPv4 header and ports of one NFULNL_MSG_PACKET body.
func parseLogged(b []byte) (loggedPacket, bool) {
	if len(b) < nfgenHdrLen {
		return loggedPacket{}, false
	}
	var p loggedPacket
	var payload []byte
	for a := b[nfgenHdrLen:]; len(a) >= nlaHdrLen; {
		l := int(binary.NativeEndian.Uint16(a[0:]))
		typ := binary.NativeEndian.Uint16(a[2:]) & 0x7fff
		if l < nlaHdrLen || l > len(a) {
			break
		}
		switch typ {
		case nfulaPrefix:
			k, err := ParseDenyKind(strings.TrimRight(string(a[nlaHdrLen:l]), "\x00"))
			if err != nil {
				return loggedPacket{}, false
			}
			p.kind = k
		case nfulaPayload:
			payload = a[nlaHdrLen:l]
		case nfulaTimestamp:
			if l >= nlaHdrLen+16 {
				sec := binary.BigEndian.Uint64(a[nlaHdrLen:])
				usec := binary.BigEndian.Uint64(a[nlaHdrLen+8:])
				p.at = time.Unix(int64(sec), int64(usec)*1000)
			}
		}
		a = a[min((l+3)&^3, len(a)):]
	}
	if p.kind == "" || len(payload) < 20 || payload[0]>>4 != 4 {
		return loggedPacket{}, false
	}
	ihl := int(payload[0]&0x0f) * 4
	p.src = netip.AddrFrom4([4]byte(payload[12:16]))
	dst := netip.AddrFrom4([4]byte(payload[16:20]))
	var port uint16
	switch proto := payload[9]; proto {
	case unix.IPPROTO_TCP, unix.IPPROTO_UDP:
		p.protocol = map[byte]string{unix.IPPROTO_TCP: "tcp", unix.IPPROTO_UDP: "udp"}[proto]
		if len(payload) >= ihl+4 {
			port = binary.BigEndian.Uint16(payload[ihl+2:])
		}
	case unix.IPPROTO_ICMP:
		p.protocol = "icmp"
	default:
		p.protocol = fmt.Sprint(proto)
	}
	p.dst = netip.AddrPortFrom(dst, port)
	if p.at.IsZero() {
		p.at = time.Now()
	}
	return p, true
}

// deniedKey groups samples of one flush window.
type deniedKey struct {
	id    string
	dst   netip.AddrPort
	proto string
	kind  DenyKind
}

// sample counts one refused packet into the current window.
func (e *Enforcer) sample(p loggedPacket) {
	h, pol := e.lookup(p.src)
	if h == nil {
		return
	}
	id := h.id
	telemetryDenied(p.kind)
	k := deniedKey{id: id, dst: p.dst, proto: p.protocol, kind: p.kind}
	e.dmu.Lock()
	defer e.dmu.Unlock()
	if d := e.window[k]; d != nil {
		d.Count++
		return
	}
	rule := p.rule
	if rule == "" {
		rule = ruleText(p.kind, p.dst.Addr(), pol, e.cfg)
	}
	e.window[k] = &Denied{SandboxID: id, Dst: p.dst, Proto: p.protocol, Kind: p.kind, Rule: rule, Count: 1, First: p.at}
}

// collectDenied reads the logged packets into the window and every flushEvery hands at most
// maxPerFlush per sandbox to the OnDenied callback.
func (e *Enforcer) collectDenied(ctx context.Context, l *nflog) {
	defer e.wg.Done()
	l.wg.Add(1)
	go l.read(e.sample)
	tick := time.NewTicker(flushEvery)
	defer tick.Stop()
	for {
		select {
		case <-e.stop:
			l.close()
			return
		case <-tick.C:
		}
		e.dmu.Lock()
		batch := e.window
		e.window = map[deniedKey]*Denied{}
		e.dmu.Unlock()
		perSandbox := map[string]int{}
		for _, d := range batch {
			if perSandbox[d.SandboxID]++; perSandbox[d.SandboxID] > maxPerFlush {
				continue
			}
			if e.cfg.OnDenied != nil {
				e.cfg.OnDenied(ctx, *d)
			}
		}
	}
}

// FlushDenied hands the samples of id not yet reported to the OnDenied callback now, in
// the caller's goroutine: one about to Detach a network that lived shorter than a flush (a
// build step) reports what its rules refused first. The caller must hold no lock OnDenied
// takes.
func (e *Enforcer) FlushDenied(ctx context.Context, id string) {
	e.dmu.Lock()
	var mine []Denied
	for k, d := range e.window {
		if k.id == id {
			delete(e.window, k)
			mine = append(mine, *d)
		}
	}
	e.dmu.Unlock()
	if e.cfg.OnDenied == nil {
		return
	}
	for _, d := range mine[:min(len(mine), maxPerFlush)] {
		e.cfg.OnDenied(ctx, d)
	}
}

// ruleText names the rule that refused dst in the user's words.
func ruleText(k DenyKind, dst netip.Addr, p Policy, cfg Config) string {
	switch k {
	case DenyOut:
		for _, d := range p.DenyOut {
			if d.Contains(dst) {
				return "denyOut " + d.String()
			}
		}
		return "denyOut"
	case DenyNoNet:
		return "allowInternetAccess false"
	case DenyLinkLocal:
		if cfg.Pool.Contains(dst) {
			return "another sandbox (" + cfg.Pool.String() + ")"
		}
		return "link-local " + linkLocal.String()
	case DenyLimit:
		return "the server's egress limit " + join(cfg.EgressLimit)
	case DenyHost:
		return "the host's own services"
	}
	return k.String()
}

func telemetryDenied(k DenyKind) { telemetry.NetworkDenied.WithLabelValues(k.String()).Inc() }
