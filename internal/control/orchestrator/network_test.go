package orchestrator

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/control/netpolicy"
	"github.com/cove-dev/cove/internal/observe/events"
	"github.com/cove-dev/cove/internal/sandbox/egress"
	"github.com/cove-dev/cove/internal/store"
	"github.com/cove-dev/cove/sdk/reason"
)

// netpolicyOf is the egress policy API over the harness's network, wired as the server wires
// it: the orchestrator answers for the sandboxes.
func netpolicyOf(h *harness) *netpolicy.Service {
	return netpolicy.New(netpolicy.Config{Network: h.o.cfg.Network, Sandboxes: h.o, Events: h.o.cfg.Events, Logger: h.o.cfg.Logger})
}

func TestASandboxJoinsItsNetworkAtCreate(t *testing.T) {
	net := newFakeNetwork(t.TempDir())
	h := newHarness(t, withNetwork(net))
	deny := []netip.Prefix{netip.MustParsePrefix("198.18.5.0/24")}
	sb := h.create(CreateRequest{AllowInternet: true, Network: &egress.Policy{DenyOut: deny}, PrivateTraffic: true,
		MaskRequestHost: "localhost:${PORT}", HTTPSPorts: []int{8443}})

	t.Run("the runtime joins the network's namespace with its resolver and the egress CA", func(t *testing.T) {
		h.rt.mu.Lock()
		spec := h.rt.specs[sb.ID]
		h.rt.mu.Unlock()
		if spec.Netns != "/run/netns/cove-"+sb.ID {
			t.Errorf("netns %q", spec.Netns)
		}
		var targets []string
		for _, b := range spec.Binds {
			targets = append(targets, b.Target)
		}
		for _, want := range []string{"/etc/resolv.conf", caBundle} {
			if !slices.Contains(targets, want) {
				t.Errorf("binds %v lack %s", targets, want)
			}
		}
	})
	t.Run("the record says it has internet access and the network has the team's policy", func(t *testing.T) {
		if rec := h.record(sb.ID); !rec.AllowInternet {
			t.Error("record says no internet access")
		}
		p, ok := netpolicyOf(h).NetworkPolicy(h.ctx("req-get"), h.team, sb.ID)
		if !ok || !p.AllowInternet || p.Team != h.team || !slices.Equal(p.DenyOut, deny) {
			t.Errorf("policy %+v, %v", p, ok)
		}
		if _, ok := netpolicyOf(h).NetworkPolicy(h.ctx("req-get"), "other-team", sb.ID); ok {
			t.Error("another team sees the policy")
		}
	})
	t.Run("its ports are private behind a token the network keeps, with the proxy's options", func(t *testing.T) {
		tok := h.o.TrafficToken(sb.ID)
		in, _ := net.Inbound(sb.ID)
		if tok == "" || in.TrafficToken != tok || in.MaskRequestHost != "localhost:${PORT}" {
			t.Errorf("token %q, inbound %+v", tok, in)
		}
		if host, ports := h.o.PortOptions(sb.ID); host != "localhost:${PORT}" || !slices.Equal(ports, []int{8443}) {
			t.Errorf("port options %q %v", host, ports)
		}
		if tok := h.o.TrafficToken("inotlive000000000000"); tok != "" {
			t.Errorf("a sandbox not live has token %q", tok)
		}
	})
	t.Run("an update replaces the policy and the record", func(t *testing.T) {
		if err := netpolicyOf(h).UpdateNetwork(h.ctx("req-net"), h.team, sb.ID, egress.Policy{AllowInternet: false}); err != nil {
			t.Fatal(err)
		}
		if p, _ := net.Policy(sb.ID); p.AllowInternet || len(p.DenyOut) != 0 || p.Team != h.team {
			t.Errorf("policy after the update %+v", p)
		}
		if rec := h.record(sb.ID); rec.AllowInternet {
			t.Error("record still says internet access")
		}
	})
	t.Run("a denied connection is logged and is a network.denied event", func(t *testing.T) {
		first := time.Now().UTC()
		netpolicyOf(h).NetworkDenied(context.Background(), egress.Denied{SandboxID: sb.ID, Dst: netip.MustParseAddrPort("198.18.5.9:443"), Proto: "tcp",
			Kind: egress.DenyOut, Rule: "denyOut 198.18.5.0/24", Count: 3, First: first})
		netpolicyOf(h).NetworkDenied(context.Background(), egress.Denied{SandboxID: "inotlive000000000000", Dst: netip.MustParseAddrPort("198.18.5.9:443")})
		h.waitFor("the denied event is stored", func() bool {
			return slices.Contains(eventTypes(h.events(sb.ID)), string(events.SandboxNetworkDenied))
		})
		_, data := h.event(sb.ID, events.SandboxNetworkDenied)
		if data["destination"] != "198.18.5.9" || data["port"] != 443.0 || data["rule"] != "denyOut 198.18.5.0/24" || data["deny_kind"] != "deny_out" || data["packets"] != 3.0 {
			t.Errorf("event data %v", data)
		}
		if len(h.logLines("network connection denied", sb.ID)) != 1 {
			t.Errorf("log lines: %v", h.logLines("network connection denied", ""))
		}
	})
	t.Run("the kill detaches the network", func(t *testing.T) {
		if err := h.o.Kill(h.ctx("req-kill"), h.team, sb.ID, reason.KillRequest, ""); err != nil {
			t.Fatal(err)
		}
		h.waitFor("the network is detached", func() bool { return net.wasDetached(sb.ID) })
		if err := netpolicyOf(h).UpdateNetwork(h.ctx("req-net"), h.team, sb.ID, egress.Policy{}); err == nil {
			t.Error("updated a killed sandbox's network")
		}
	})
}

func TestNetworkFailuresAreClear(t *testing.T) {
	t.Run("a network that cannot attach fails the create and leaves nothing", func(t *testing.T) {
		net := newFakeNetwork(t.TempDir())
		net.attachErr = errFake
		h := newHarness(t, withNetwork(net))
		if _, err := h.o.Create(h.ctx("req-create"), CreateRequest{TeamID: h.team}); !errors.Is(err, errFake) {
			t.Fatalf("create: %v", err)
		}
		if ids, _ := h.rt.List(context.Background()); len(ids) != 0 {
			t.Errorf("runtime holds %v", ids)
		}
		if page, _ := h.o.List(context.Background(), store.SandboxFilter{TeamID: h.team}); len(page.Sandboxes) != 0 {
			t.Errorf("records %v", page.Sandboxes)
		}
	})
	t.Run("an update the network refuses changes nothing and says why", func(t *testing.T) {
		net := newFakeNetwork(t.TempDir())
		h := newHarness(t, withNetwork(net))
		sb := h.create(CreateRequest{AllowInternet: true})
		net.mu.Lock()
		net.updateErr = errFake
		net.mu.Unlock()
		err := netpolicyOf(h).UpdateNetwork(h.ctx("req-net"), h.team, sb.ID, egress.Policy{})
		if !errors.Is(err, errFake) || !strings.Contains(err.Error(), sb.ID) {
			t.Errorf("update: %v", err)
		}
		if !h.record(sb.ID).AllowInternet {
			t.Error("the record changed")
		}
		if err := netpolicyOf(h).UpdateNetwork(h.ctx("req-net"), "other-team", sb.ID, egress.Policy{}); !errors.Is(err, ErrNotFound) {
			t.Errorf("another team's update: %v", err)
		}
	})
	t.Run("a server without networks gives no internet access and refuses updates", func(t *testing.T) {
		h := newHarness(t)
		sb := h.create(CreateRequest{AllowInternet: true})
		if h.record(sb.ID).AllowInternet {
			t.Error("record says internet access")
		}
		if err := netpolicyOf(h).UpdateNetwork(h.ctx("req-net"), h.team, sb.ID, egress.Policy{}); !errors.Is(err, netpolicy.ErrConflict) {
			t.Errorf("update: %v", err)
		}
		if _, ok := netpolicyOf(h).NetworkPolicy(h.ctx("req-get"), h.team, sb.ID); ok {
			t.Error("a policy without a network")
		}
	})
}

// The fork and the snapshot carry the network: each copy attaches a network of its own with
// the origin's policy.
func TestCopiesGetTheirOriginsNetworkPolicy(t *testing.T) {
	net := newFakeNetwork(t.TempDir())
	h := newHarness(t, withNetwork(net), withSnapshots(t, t.TempDir()+"/snapshots"))
	allow := []netip.Prefix{netip.MustParsePrefix("198.18.7.0/24")}
	src := h.create(CreateRequest{AllowInternet: false, Network: &egress.Policy{AllowOut: allow}, PrivateTraffic: true})
	res, err := h.o.Fork(h.ctx("req-fork"), h.team, src.ID, 1, 0)
	if err != nil || res[0].Err != nil {
		t.Fatalf("fork: %v %v", err, res)
	}
	sn, err := h.o.CreateSnapshot(h.ctx("req-snap"), h.team, src.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	fromSnap := h.create(CreateRequest{TemplateID: sn.ID, AllowInternet: true})
	for _, id := range []string{res[0].Sandbox.ID, fromSnap.ID} {
		p, ok := net.Policy(id)
		if !ok || p.AllowInternet || !slices.Equal(p.AllowOut, allow) {
			t.Errorf("copy %s policy %+v, %v; want the origin's", id, p, ok)
		}
		if tok := h.o.TrafficToken(id); tok != h.o.TrafficToken(src.ID) || tok == "" {
			t.Errorf("copy %s traffic token %q; want the origin's", id, tok)
		}
	}
	h.rt.mu.Lock()
	spec := h.rt.specs[fromSnap.ID]
	h.rt.mu.Unlock()
	if spec.Netns == "" || spec.Restore == "" || spec.Start {
		t.Errorf("spec %+v: want a restore into its own namespace", spec)
	}
}
