package network

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/cove-dev/cove/internal/sandbox/runtime"
)

// slot is one sandbox's network: a pinned namespace, a veth pair (the host end named
// <prefix>-<index>, the sandbox's end eth0) and a /30 of the pool: .1 the host end (the
// sandbox's gateway and resolver), .2 the sandbox.
type slot struct {
	index      int
	link       string
	host, addr netip.Addr
	netns      string
	resolv     string
	// ruled is set once the slot's chain and map entry exist, with the open policy (a
	// warm slot gets them ahead, so a create with no rules runs no nft at all).
	ruled bool
	// mark is what the connections its current policy accepted carry (0: none yet); see
	// sandboxScript.
	mark uint32
}

func (s *slot) chain() string { return fmt.Sprintf("sb_%d", s.index) }
func (s *slot) set() string   { return fmt.Sprintf("hosts_%d", s.index) }

// blockSize is the addresses each sandbox takes from the pool: a /30.
const blockSize = 4

// makeSlot builds slot index: namespace, veth, addresses, routes, forwarding and resolv.conf.
// On error it removes what it made.
func (m *Manager) makeSlot(index int) (*slot, error) {
	s := m.slotAt(index)
	if err := m.buildSlot(s); err != nil {
		return nil, err
	}
	return s, nil
}

// slotAt is slot index of this manager's pool and generation, not built.
func (m *Manager) slotAt(index int) *slot {
	base := m.cfg.Pool.Addr().As4()
	n := uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3])
	n += uint32(index * blockSize)
	return &slot{
		index:  index,
		link:   fmt.Sprintf("%s-%d", m.cfg.LinkPrefix, index),
		host:   netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n + 1)}),
		addr:   netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n + 2)}),
		netns:  filepath.Join(m.cfg.StateDir, fmt.Sprintf("ns-%s-%d", m.gen, index)),
		resolv: filepath.Join(m.cfg.FilesDir, fmt.Sprintf("resolv-%s-%d.conf", m.gen, index)),
	}
}

// buildSlot makes slot s on the host, in the namespace pinned at its path if there is one (a
// re-claimed slot whose link is gone: the sandbox's processes are in that namespace). On
// error it removes the slot.
func (m *Manager) buildSlot(s *slot) (err error) {
	defer func() {
		if err != nil {
			err = errors.Join(err, m.removeSlot(s))
		}
	}()
	if _, err := os.Stat(s.netns); err != nil { // a re-claimed slot may keep its namespace
		if err := runtime.CreateNetns(s.netns); err != nil {
			return fmt.Errorf("netns: %w", err)
		}
	}
	ns, err := netns.GetFromPath(s.netns)
	if err != nil {
		return fmt.Errorf("open netns: %w", err)
	}
	defer ns.Close()
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: s.link, MTU: 1500}, PeerName: "eth0", PeerNamespace: netlink.NsFd(int(ns))}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("add veth %s: %w", s.link, err)
	}
	hostLink, err := netlink.LinkByName(s.link)
	if err != nil {
		return fmt.Errorf("find %s: %w", s.link, err)
	}
	// No IPv6 on the host end (a sandbox has none); forwarding on for this link only.
	_ = os.WriteFile("/proc/sys/net/ipv6/conf/"+s.link+"/disable_ipv6", []byte("1"), 0)
	if err := os.WriteFile("/proc/sys/net/ipv4/conf/"+s.link+"/forwarding", []byte("1"), 0); err != nil {
		return fmt.Errorf("forwarding on %s: %w", s.link, err)
	}
	if err := netlink.AddrAdd(hostLink, &netlink.Addr{IPNet: ipnet(s.host, 30)}); err != nil {
		return fmt.Errorf("address %s on %s: %w", s.host, s.link, err)
	}
	if err := netlink.LinkSetUp(hostLink); err != nil {
		return fmt.Errorf("up %s: %w", s.link, err)
	}
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return fmt.Errorf("netlink in netns: %w", err)
	}
	defer h.Close()
	eth0, err := h.LinkByName("eth0")
	if err != nil {
		return fmt.Errorf("find eth0 in netns: %w", err)
	}
	if err := h.AddrAdd(eth0, &netlink.Addr{IPNet: ipnet(s.addr, 30)}); err != nil {
		return fmt.Errorf("address %s on eth0: %w", s.addr, err)
	}
	if err := h.LinkSetUp(eth0); err != nil {
		return fmt.Errorf("up eth0: %w", err)
	}
	if err := h.RouteAdd(&netlink.Route{LinkIndex: eth0.Attrs().Index, Gw: s.host.AsSlice()}); err != nil {
		return fmt.Errorf("default route: %w", err)
	}
	if err := os.WriteFile(s.resolv, []byte("nameserver "+s.host.String()+"\n"), 0o644); err != nil {
		return fmt.Errorf("resolv.conf: %w", err)
	}
	return nil
}

// removeSlot deletes the host end of the veth (the kernel takes the pair), unpins the
// namespace and removes the resolv.conf; each part may be gone already.
func (m *Manager) removeSlot(s *slot) error {
	var errs []error
	if l, err := netlink.LinkByName(s.link); err == nil {
		if err := deleteLink(l); err != nil {
			errs = append(errs, fmt.Errorf("delete %s: %w", s.link, err))
		}
	}
	if err := runtime.RemoveNetns(s.netns); err != nil {
		errs = append(errs, err)
	}
	if err := os.Remove(s.resolv); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// sweep removes what a previous server with this configuration left: links with the prefix,
// pinned namespaces and resolv.conf files in the state dir, but for the slots its sandboxes
// recorded (m.claims), which they re-claim.
func (m *Manager) sweep() error {
	var errs []error
	links, err := consistentDump(netlink.LinkList)
	if err != nil {
		return fmt.Errorf("list links: %w", err)
	}
	for _, l := range links {
		name := l.Attrs().Name
		if rest, ok := strings.CutPrefix(name, m.cfg.LinkPrefix+"-"); ok && isDigits(rest) && !m.claimed(name) {
			if err := deleteLink(l); err != nil {
				errs = append(errs, fmt.Errorf("delete %s: %w", name, err))
			}
		}
	}
	for _, dir := range slices.Compact([]string{m.cfg.StateDir, m.cfg.FilesDir}) {
		entries, err := os.ReadDir(dir)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		for _, e := range entries {
			p := filepath.Join(dir, e.Name())
			if m.claimed(p) {
				continue
			}
			if strings.HasPrefix(e.Name(), "ns-") {
				if err := runtime.RemoveNetns(p); err != nil {
					errs = append(errs, err)
				}
			} else if strings.HasPrefix(e.Name(), "resolv-") {
				_ = os.Remove(p)
			}
		}
	}
	return errors.Join(errs...)
}

// dumpAttempts bounds the re-reads of a netlink dump that a concurrent change interrupted.
const dumpAttempts = 10

// consistentDump reads a netlink dump again while the kernel says a change interrupted it
// (NLM_F_DUMP_INTR: links come and go while another server or the kernel's namespace cleanup
// works), so a sweep never acts on a half list nor fails for a neighbour's change.
func consistentDump[T any](dump func() ([]T, error)) ([]T, error) {
	for i := 1; ; i++ {
		v, err := dump()
		if !errors.Is(err, netlink.ErrDumpInterrupted) || i == dumpAttempts {
			return v, err
		}
	}
}

// deleteLink deletes a link; one already gone is not an error. The kernel removes a veth
// pair by itself when its peer's namespace is freed, which it does asynchronously: a link
// listed a moment ago may be gone by the time it is deleted.
func deleteLink(l netlink.Link) error {
	if err := netlink.LinkDel(l); err != nil && !errors.Is(err, unix.ENODEV) {
		return err
	}
	return nil
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

func ipnet(a netip.Addr, bits int) *net.IPNet {
	return &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(bits, 32)}
}

// checkPoolFree refuses a pool that overlaps a route this server did not make: another
// server's pool, or a network the host is on.
func (m *Manager) checkPoolFree() error {
	routes, err := consistentDump(func() ([]netlink.Route, error) { return netlink.RouteList(nil, netlink.FAMILY_V4) })
	if err != nil {
		return fmt.Errorf("list routes: %w", err)
	}
	for _, r := range routes {
		if r.Dst == nil {
			continue
		}
		p, ok := netip.AddrFromSlice(r.Dst.IP)
		if !ok {
			continue
		}
		ones, _ := r.Dst.Mask.Size()
		dst := netip.PrefixFrom(p.Unmap(), ones)
		if ones == 0 {
			continue // the default route
		}
		if dst.Overlaps(m.cfg.Pool) {
			name := fmt.Sprint(r.LinkIndex)
			if l, err := netlink.LinkByIndex(r.LinkIndex); err == nil {
				name = l.Attrs().Name
			}
			if m.claimed(name) {
				continue // a recorded sandbox's own link, re-claimed after the start
			}
			return fmt.Errorf("address pool %s overlaps the route to %s on %s: choose another pool (--network-pool)", m.cfg.Pool, dst, name)
		}
	}
	return nil
}
