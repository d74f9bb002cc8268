package network

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/sandbox/egress"
	"github.com/cove-dev/cove/internal/store"
	"github.com/vishvananda/netlink"
)

// Allocation is one sandbox's network as the manager records it (in Config.Records, under
// Config.Node; an older release wrote it as <RecordDir>/<id>.json, in this JSON shape): its
// slot (pinned namespace, link, address, resolv.conf) and its policy. A restarted server
// reads the records at start, keeps those slots out of the sweep, and gives each back to
// the sandbox that owns it (Reclaim), so a sandbox adopted running keeps its egress under
// the same rules and one paused as a snapshot is restored into its own namespace. The
// namespace's name keeps the generation of the server that made it: a slot is only ever
// re-claimed by the sandbox id it was recorded for, never handed to another one.
type Allocation struct {
	ID         string        `json:"id"`
	Index      int           `json:"index"`
	Link       string        `json:"link"`
	Addr       netip.Addr    `json:"addr"`
	Netns      string        `json:"netns"`
	ResolvConf string        `json:"resolvConf"`
	Policy     egress.Policy `json:"policy"`
	Inbound    Inbound       `json:"inbound"`
}

// Inbound is how Cove's proxy reaches a sandbox's ports, the rest of E2B's network config:
// recorded with the allocation so that a restarted server keeps private ports private.
type Inbound struct {
	// TrafficToken is what the sandbox's ports require (allowPublicTraffic false); "" public.
	TrafficToken string `json:"trafficToken,omitempty"`
	// MaskRequestHost is the Host header sent to its ports (${PORT} is the port).
	MaskRequestHost string `json:"maskRequestHost,omitempty"`
	// HTTPSPorts serve HTTPS.
	HTTPSPorts []int `json:"httpsPorts,omitempty"`
}

// claim is a recorded slot a sandbox of an earlier server owns, not re-claimed yet.
type claim struct {
	slot    *slot
	policy  egress.Policy
	inbound Inbound
}

// recordConfig is the part of a record the store keeps sealed: an egress proxy's password,
// header rules' values and the traffic token are in it.
type recordConfig struct {
	Policy  egress.Policy `json:"policy"`
	Inbound Inbound       `json:"inbound"`
}

func (m *Manager) toRecord(a Allocation) (*store.NetworkRecord, error) {
	b, err := json.Marshal(recordConfig{Policy: a.Policy, Inbound: a.Inbound})
	if err != nil {
		return nil, fmt.Errorf("record network of %s: %w", a.ID, err)
	}
	return &store.NetworkRecord{Node: m.cfg.Node, SandboxID: a.ID, Index: a.Index, Link: a.Link, Addr: a.Addr.String(), Netns: a.Netns,
		ResolvConf: a.ResolvConf, Config: b, UpdatedAt: time.Now().UTC()}, nil
}

func fromRecord(r *store.NetworkRecord) (Allocation, error) {
	a := Allocation{ID: r.SandboxID, Index: r.Index, Link: r.Link, Netns: r.Netns, ResolvConf: r.ResolvConf}
	var err error
	if a.Addr, err = netip.ParseAddr(r.Addr); err != nil {
		return a, fmt.Errorf("address: %w", err)
	}
	var c recordConfig
	if err := json.Unmarshal(r.Config, &c); err != nil {
		return a, fmt.Errorf("policy: %w", err)
	}
	a.Policy, a.Inbound = c.Policy, c.Inbound
	return a, nil
}

// record stores sandbox id's allocation, replacing the one before (a crash leaves the old
// record or the new one). Without Config.Records nothing is recorded: a restart re-claims
// nothing.
func (m *Manager) record(id string, s *slot, p egress.Policy, in Inbound) error {
	if m.cfg.Records == nil {
		return nil
	}
	r, err := m.toRecord(Allocation{ID: id, Index: s.index, Link: s.link, Addr: s.addr, Netns: s.netns, ResolvConf: s.resolv, Policy: p, Inbound: in})
	if err != nil {
		return err
	}
	// No caller's context reaches here (SetInbound has none): a record is one local query.
	if err := m.cfg.Records.PutNetworkRecord(context.Background(), r); err != nil {
		return fmt.Errorf("record network of %s: %w", id, err)
	}
	return nil
}

// unrecord removes sandbox id's record; a missing one is fine.
func (m *Manager) unrecord(id string) {
	if m.cfg.Records != nil {
		if err := m.cfg.Records.DeleteNetworkRecord(context.Background(), m.cfg.Node, id); err != nil {
			m.cfg.Logger.Warn("network: record not removed", telemetry.KeySandboxID, id, telemetry.KeyError, err.Error())
		}
	}
}

// moveLegacy moves the <id>.json records an older release wrote in RecordDir into
// Config.Records, each file removed once its record is stored. A file whose record is
// there already (a start cut short between the two) is only removed.
func (m *Manager) moveLegacy(ctx context.Context, have map[string]bool) error {
	entries, err := os.ReadDir(m.cfg.RecordDir)
	if err != nil {
		return nil // no directory: nothing to move
	}
	for _, e := range entries {
		path := filepath.Join(m.cfg.RecordDir, e.Name())
		if strings.HasSuffix(e.Name(), ".json.tmp") {
			_ = os.Remove(path) // a write a crash interrupted
			continue
		}
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok {
			continue
		}
		if !have[id] {
			var a Allocation
			b, err := os.ReadFile(path)
			if err == nil {
				err = json.Unmarshal(b, &a)
			}
			if err == nil && a.ID != id {
				err = fmt.Errorf("the record names sandbox %q", a.ID)
			}
			if err != nil {
				m.cfg.Logger.Warn("network: recorded allocation dropped", telemetry.KeySandboxID, id, telemetry.KeyError, err.Error())
				_ = os.Remove(path)
				continue
			}
			r, err := m.toRecord(a)
			if err != nil {
				return err
			}
			if err := m.cfg.Records.PutNetworkRecord(ctx, r); err != nil {
				return fmt.Errorf("move %s into the store: %w", path, err)
			}
			have[id] = true
		}
		if err := os.Remove(path); err != nil {
			return fmt.Errorf("remove %s after moving it into the store: %w", path, err)
		}
	}
	return nil
}

// loadClaims reads the records an earlier server on this node left (after moving an older
// release's files in). A record this configuration cannot honour (another pool or link
// prefix, a namespace outside the state dir, an index taken twice) is dropped: its slot is
// swept like any leftover, and its sandbox comes back with no network of this manager's.
// Another node's records are never read, so never dropped.
func (m *Manager) loadClaims(ctx context.Context) (map[string]*claim, error) {
	claims := map[string]*claim{}
	if m.cfg.Records == nil {
		return claims, nil
	}
	recs, err := m.cfg.Records.NetworkRecords(ctx, m.cfg.Node)
	if err != nil {
		return nil, fmt.Errorf("network records: %w", err)
	}
	have := map[string]bool{}
	for _, r := range recs {
		have[r.SandboxID] = true
	}
	if err := m.moveLegacy(ctx, have); err != nil {
		return nil, err
	}
	if recs, err = m.cfg.Records.NetworkRecords(ctx, m.cfg.Node); err != nil {
		return nil, fmt.Errorf("network records: %w", err)
	}
	byIndex := map[int]bool{}
	for _, r := range recs {
		a, err := fromRecord(r)
		if err == nil {
			err = m.checkAllocation(r.SandboxID, a, byIndex)
		}
		if err != nil {
			m.cfg.Logger.Warn("network: recorded allocation dropped", telemetry.KeySandboxID, r.SandboxID, telemetry.KeyError, err.Error())
			m.unrecord(r.SandboxID)
			continue
		}
		byIndex[a.Index] = true
		s := m.slotAt(a.Index)
		s.netns, s.resolv = a.Netns, a.ResolvConf
		claims[a.ID] = &claim{slot: s, policy: a.Policy, inbound: a.Inbound}
	}
	return claims, nil
}

// checkAllocation says why record a cannot be honoured by this manager, if it cannot.
func (m *Manager) checkAllocation(id string, a Allocation, taken map[int]bool) error {
	n := 1 << (32 - m.cfg.Pool.Bits()) / blockSize
	switch {
	case a.ID != id:
		return fmt.Errorf("the record names sandbox %q", a.ID)
	case a.Index < 0 || a.Index >= n:
		return fmt.Errorf("index %d is outside pool %s", a.Index, m.cfg.Pool)
	case taken[a.Index]:
		return fmt.Errorf("index %d is recorded twice", a.Index)
	}
	s := m.slotAt(a.Index)
	switch {
	case a.Link != s.link || a.Addr != s.addr:
		return fmt.Errorf("link %s address %s, not %s %s of this configuration", a.Link, a.Addr, s.link, s.addr)
	case filepath.Dir(a.Netns) != m.cfg.StateDir || !strings.HasPrefix(filepath.Base(a.Netns), "ns-"):
		return fmt.Errorf("namespace %s is not in %s", a.Netns, m.cfg.StateDir)
	case (filepath.Dir(a.ResolvConf) != m.cfg.FilesDir && filepath.Dir(a.ResolvConf) != m.cfg.StateDir) || !strings.HasPrefix(filepath.Base(a.ResolvConf), "resolv-"):
		// (StateDir: where a server before FilesDir wrote it.)
		return fmt.Errorf("resolv.conf %s is not in %s", a.ResolvConf, m.cfg.FilesDir)
	}
	return nil
}

// claimed reports whether a path or link name belongs to a recorded slot (the sweep spares it).
func (m *Manager) claimed(name string) bool {
	for _, c := range m.claims {
		if name == c.slot.link || name == c.slot.netns || name == c.slot.resolv {
			return true
		}
	}
	return false
}

// Reclaim gives sandbox id back the network an earlier server recorded for it: the same
// namespace, link, address and policy, its rules rebuilt in the new table. A namespace that
// is gone (the host rebooted) is made again at the same path, so a snapshot restores into a
// namespace only its own sandbox could have. ErrNotAttached when nothing is recorded for id.
func (m *Manager) Reclaim(ctx context.Context, id string) (*Attachment, error) {
	m.mu.Lock()
	c := m.claims[id]
	delete(m.claims, id)
	m.mu.Unlock()
	if c == nil {
		return nil, fmt.Errorf("%w: nothing recorded for %s", ErrNotAttached, id)
	}
	s := c.slot
	fail := func(err error) (*Attachment, error) {
		m.unrecord(id)
		return nil, errors.Join(fmt.Errorf("reclaim network of %s: %w", id, err), m.release(s))
	}
	if !slotIntact(s) {
		// The link goes with its peer; the namespace, if it is still pinned, stays (the
		// sandbox's processes may be in it). Then the slot is made again around it.
		if l, err := netlink.LinkByName(s.link); err == nil {
			if err := deleteLink(l); err != nil {
				return fail(fmt.Errorf("delete %s: %w", s.link, err))
			}
		}
		if err := m.buildSlot(s); err != nil {
			return fail(err)
		}
	}
	if err := m.applyPolicy(ctx, s, c.policy, false); err != nil {
		return fail(err)
	}
	s.ruled = true
	m.mu.Lock()
	m.attached[id] = &held{id: id, slot: s, policy: c.policy, inbound: c.inbound}
	m.mu.Unlock()
	m.egress.Add(id, s.addr, s.host, c.policy)
	m.cfg.Logger.Info("network reclaimed", telemetry.KeySandboxID, id, telemetry.KeyNetworkAddr, s.addr.String(), telemetry.KeyNetworkLink, s.link)
	return &Attachment{Netns: s.netns, ResolvConf: s.resolv, Addr: s.addr, Gateway: s.host}, nil
}

// slotIntact reports whether s's pinned namespace and host link are both there.
func slotIntact(s *slot) bool {
	if _, err := os.Stat(s.netns); err != nil {
		return false
	}
	_, err := netlink.LinkByName(s.link)
	return err == nil
}

// DropUnclaimed removes the recorded slots no sandbox re-claimed (their sandboxes were not
// adopted): the end of a restart's recovery.
func (m *Manager) DropUnclaimed(ctx context.Context) error {
	m.mu.Lock()
	claims := m.claims
	m.claims = map[string]*claim{}
	m.mu.Unlock()
	var errs []error
	for id, c := range claims {
		m.unrecord(id)
		m.removeTrustBundle(id)
		errs = append(errs, m.release(c.slot))
	}
	return errors.Join(errs...)
}

// dropClaim removes sandbox id's recorded slot if it was never re-claimed; false if none.
func (m *Manager) dropClaim(id string) (bool, error) {
	m.mu.Lock()
	c := m.claims[id]
	delete(m.claims, id)
	m.mu.Unlock()
	if c == nil {
		return false, nil
	}
	m.unrecord(id)
	m.removeTrustBundle(id)
	return true, m.release(c.slot)
}

// SetInbound records how the proxy reaches sandbox id's ports, beside its network.
func (m *Manager) SetInbound(id string, in Inbound) error {
	m.mu.Lock()
	h := m.attached[id]
	var p egress.Policy
	if h != nil {
		p = h.policy
	}
	m.mu.Unlock()
	if h == nil {
		return fmt.Errorf("%w: %s", ErrNotAttached, id)
	}
	if err := m.record(id, h.slot, p, in); err != nil {
		return err
	}
	m.mu.Lock()
	h.inbound = in
	m.mu.Unlock()
	return nil
}

// Inbound is what SetInbound recorded for sandbox id (or an earlier server did, for a
// re-claimed one).
func (m *Manager) Inbound(id string) (Inbound, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if h := m.attached[id]; h != nil {
		return h.inbound, true
	}
	return Inbound{}, false
}
