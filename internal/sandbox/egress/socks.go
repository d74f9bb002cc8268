package egress

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/internal/observe/telemetry"
)

// Proxy is a SOCKS5 proxy a sandbox's outbound TCP is tunneled through, after its
// allow and deny rules (E2B's egressProxy). The sandbox is unaware: its connections are
// redirected on the host. When the proxy cannot be reached, the connection fails: egress
// never falls back to going direct.
type Proxy struct {
	Address  string // host:port
	Username string // RFC 1929, at most 255 bytes; "" for no authentication
	Password string
}

// parseEgressProxy validates a proxy config; the error names the field.
func parseEgressProxy(field string, p *Proxy, forbidPrivate bool) error {
	host, port, err := net.SplitHostPort(p.Address)
	if err != nil || host == "" {
		return fmt.Errorf("%w: %s.address %q: want host:port", ErrInvalid, field, p.Address)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("%w: %s.address %q: port must be 1 to 65535", ErrInvalid, field, p.Address)
	}
	if a, err := netip.ParseAddr(host); err == nil {
		a = a.Unmap()
		if forbidPrivate && (a.IsPrivate() || a.IsLoopback() || a.IsLinkLocalUnicast() || a.IsUnspecified()) {
			return fmt.Errorf("%w: %s.address %q: this server forbids proxies in private, loopback and link-local ranges", ErrInvalid, field, p.Address)
		}
	} else if _, err := parseHostname(host); err != nil || !looksLikeName(host) {
		return fmt.Errorf("%w: %s.address %q: not an address or hostname", ErrInvalid, field, p.Address)
	}
	if len(p.Username) > 255 || len(p.Password) > 255 {
		return fmt.Errorf("%w: %s: username and password are at most 255 bytes each", ErrInvalid, field)
	}
	if p.Username == "" && p.Password != "" {
		return fmt.Errorf("%w: %s.password without a username", ErrInvalid, field)
	}
	return nil
}

// CheckProxy applies an operator's rule on proxy addresses to p's egress proxy, if it has
// one: with forbidPrivate, one at a private, loopback or link-local address is refused
// (such a proxy reaches inside the operator's network). Errors wrap ErrInvalid.
func CheckProxy(p Policy, forbidPrivate bool) error {
	if p.EgressProxy == nil {
		return nil
	}
	return parseEgressProxy("network.egressProxy", p.EgressProxy, forbidPrivate)
}

// transparent accepts the TCP connections the table redirects from sandboxes that have an
// egress proxy, checks them against the sandbox's policy and tunnels them through its proxy.
type transparent struct {
	ln net.Listener
	wg sync.WaitGroup
}

func (e *Enforcer) listenTransparent() (*transparent, error) {
	ln, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		return nil, fmt.Errorf("egress proxy listener: %w", err)
	}
	t := &transparent{ln: ln}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.wg.Add(1)
			go func() {
				defer t.wg.Done()
				e.tunnel(c.(*net.TCPConn))
			}()
		}
	}()
	return t, nil
}

func (t *transparent) port() int { return t.ln.Addr().(*net.TCPAddr).Port }

func (t *transparent) close() {
	t.ln.Close()
	t.wg.Wait()
}

// tunnel serves one redirected connection: fail closed on anything unexpected.
func (e *Enforcer) tunnel(c *net.TCPConn) {
	defer c.Close()
	src := c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
	dst, err := originalDst(c)
	if err != nil {
		_ = c.SetLinger(0)
		return
	}
	h, p := e.lookup(src)
	if h == nil || (p.EgressProxy == nil && len(p.Transforms) == 0) {
		_ = c.SetLinger(0)
		return
	}
	if kind, ok := e.decide(h, dst.Addr()); !ok {
		e.sample(loggedPacket{kind: kind, src: src, dst: dst, protocol: "tcp", at: time.Now()})
		_ = c.SetLinger(0) // a reset, as the table gives
		return
	}
	if p.EgressProxy == nil { // redirected for its transforms (ports 80 and 443)
		e.intercept(c, h, p, dst)
		return
	}
	// A flow to an address an allowed name resolved to asks the proxy for the name (remote
	// DNS, ATYP=domain), as E2B does; any other, for the address.
	e.mu.Lock()
	l, named := h.learned[dst.Addr()]
	e.mu.Unlock()
	name := ""
	if named && time.Now().Before(l.until) {
		name = l.name
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	up, err := dialSOCKS5(ctx, *p.EgressProxy, dst, name)
	cancel()
	if err != nil {
		e.cfg.Logger.Warn("egress proxy: connection refused (fail closed)", telemetry.KeySandboxID, h.id,
			telemetry.KeyNetworkDestination, dst.String(), telemetry.KeyNetworkProxy, p.EgressProxy.Address, telemetry.KeyError, err.Error())
		_ = c.SetLinger(0)
		return
	}
	defer up.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); closeWrite(up); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); _ = c.CloseWrite(); done <- struct{}{} }()
	<-done
	<-done
}

func closeWrite(c net.Conn) {
	if tc, ok := c.(interface{ CloseWrite() error }); ok {
		_ = tc.CloseWrite()
	}
}

func containsAny(ps []netip.Prefix, a netip.Addr) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// originalDst is where the sandbox meant to connect before the redirect (SO_ORIGINAL_DST).
func originalDst(c *net.TCPConn) (netip.AddrPort, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	var sa unix.RawSockaddrInet4
	var serr error
	err = raw.Control(func(fd uintptr) {
		l := uint32(unix.SizeofSockaddrInet4)
		_, _, e := syscall.Syscall6(syscall.SYS_GETSOCKOPT, fd, unix.SOL_IP, 80 /* SO_ORIGINAL_DST */, uintptr(unsafe.Pointer(&sa)), uintptr(unsafe.Pointer(&l)), 0)
		if e != 0 {
			serr = e
		}
	})
	if err = errors.Join(err, serr); err != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination: %w", err)
	}
	port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:])
	return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), port), nil
}

// dialSOCKS5 opens a connection to dst through the proxy (RFC 1928, RFC 1929 auth).
func dialSOCKS5(ctx context.Context, p Proxy, dst netip.AddrPort, name string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", p.Address)
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	fail := func(err error) (net.Conn, error) { c.Close(); return nil, err }
	method := byte(0x00)
	if p.Username != "" {
		method = 0x02
	}
	if _, err := c.Write([]byte{5, 1, method}); err != nil {
		return fail(err)
	}
	var sel [2]byte
	if _, err := io.ReadFull(c, sel[:]); err != nil {
		return fail(fmt.Errorf("socks5 greeting: %w", err))
	}
	if sel[0] != 5 || sel[1] != method {
		return fail(fmt.Errorf("socks5: proxy refused authentication method %d", method))
	}
	if method == 0x02 {
		msg := append([]byte{1, byte(len(p.Username))}, p.Username...)
		msg = append(append(msg, byte(len(p.Password))), p.Password...)
		if _, err := c.Write(msg); err != nil {
			return fail(err)
		}
		var st [2]byte
		if _, err := io.ReadFull(c, st[:]); err != nil {
			return fail(fmt.Errorf("socks5 auth: %w", err))
		}
		if st[1] != 0 {
			return fail(errors.New("socks5: the proxy rejected the username and password"))
		}
	}
	a := dst.Addr().As4()
	req := []byte{5, 1, 0, 1, a[0], a[1], a[2], a[3], byte(dst.Port() >> 8), byte(dst.Port())}
	if name != "" && len(name) < 256 {
		req = append(append([]byte{5, 1, 0, 3, byte(len(name))}, name...), byte(dst.Port()>>8), byte(dst.Port()))
	}
	if _, err := c.Write(req); err != nil {
		return fail(err)
	}
	var rep [4]byte
	if _, err := io.ReadFull(c, rep[:]); err != nil {
		return fail(fmt.Errorf("socks5 connect: %w", err))
	}
	if rep[1] != 0 {
		return fail(fmt.Errorf("socks5: connect to %s refused by the proxy (reply %d)", dst, rep[1]))
	}
	skip := map[byte]int{1: 4 + 2, 4: 16 + 2}[rep[3]]
	if rep[3] == 3 {
		var l [1]byte
		if _, err := io.ReadFull(c, l[:]); err != nil {
			return fail(err)
		}
		skip = int(l[0]) + 2
	}
	if _, err := io.ReadFull(c, make([]byte, skip)); err != nil {
		return fail(err)
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}
