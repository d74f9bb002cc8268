package runtime_test

import (
	"context"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/sandbox/egress"
	"github.com/cove-dev/cove/internal/sandbox/network"
	"github.com/cove-dev/cove/internal/sandbox/network/nettest"
	"github.com/cove-dev/cove/internal/sandbox/runtime"
)

// TestEnginesOnCovesNetwork runs a sandbox of each engine in a namespace of Cove's network
// manager (a veth, nftables egress rules, Cove's resolver): under runsc the sentry uses the
// host's stack inside that namespace (--network=host), so the same rules hold.
func TestEnginesOnCovesNetwork(t *testing.T) {
	in := nettest.New(t)
	in.SetName("web.test", in.Addr)
	srv := nettest.ReserveServer(t)
	m, err := network.New(context.Background(), network.Config{
		Pool: srv.Pool, Table: srv.Table, LinkPrefix: srv.LinkPrefix, LogGroup: srv.LogGroup,
		DNS: []netip.AddrPort{in.DNS()}, EgressLimit: []netip.Prefix{nettest.Range}, StateDir: t.TempDir(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	eachEngine(t, func(t *testing.T, r *runtime.Runc, rootfs string) {
		id := newID(t)
		p := egress.Policy{AllowInternet: true, DenyOut: []netip.Prefix{netip.PrefixFrom(in.Other, 32)}}
		a, err := m.Attach(context.Background(), id, p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Detach(context.Background(), id) })
		s := run(t, r, runtime.Spec{ID: id, Rootfs: rootfs, Netns: a.Netns,
			Binds: []runtime.Bind{{Source: a.ResolvConf, Target: "/etc/resolv.conf", ReadOnly: true}},
			// busybox's nslookup asks the resolver itself (its static wget cannot resolve).
			Args: sh(`echo resolved=$(nslookup web.test 2>/dev/null | grep -A1 'Name:.*web.test' | grep -o '198[.0-9]*');
				wget -q -O /tmp/h http://` + in.Addr.String() + `/hello && echo allowed=$(cat /tmp/h);
				wget -q -T 2 -O - http://` + in.Other.String() + `/ >/dev/null 2>&1 && echo denied=reached || echo denied=refused;
				echo done; sleep 300`)})
		s.stdout.waitFor(t, "done", 30*time.Second)
		out := s.stdout.String()
		t.Logf("sandbox:\n%s", out)
		if !strings.Contains(out, "resolved="+in.Addr.String()+"\n") {
			t.Errorf("web.test did not resolve to %s through Cove's resolver", in.Addr)
		}
		if !strings.Contains(out, "allowed=hello") {
			t.Errorf("the allowed host was not reached")
		}
		if !strings.Contains(out, "denied=refused") {
			t.Errorf("a host outside allowOut was reached")
		}
		ns, err := exec.Command("nsenter", "--net="+a.Netns, "ip", "-4", "-o", "addr").CombinedOutput()
		if err != nil || !strings.Contains(string(ns), a.Addr.String()+"/") {
			t.Errorf("the namespace's address %s after the start: %s %v", a.Addr, ns, err)
		}
		reqs := in.Requests()
		if len(reqs) == 0 || !strings.HasPrefix(reqs[len(reqs)-1].RemoteAddr, in.Gateway.String()+":") {
			t.Errorf("the test host's last request %v: want one from the host's NAT address %s", reqs, in.Gateway)
		}
	})
}
