package server

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/cove-dev/cove/internal/builder/template"
	"github.com/cove-dev/cove/internal/builder/template/build"
	"github.com/cove-dev/cove/internal/control/orchestrator"
	"github.com/cove-dev/cove/internal/sandbox/egress"
	"github.com/cove-dev/cove/internal/sandbox/network"
)

func TestStopActions(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want StopAction
		err  bool
	}{{"keep", StopKeep, false}, {"kill", StopKill, false}, {"", "", true}, {"pause", "", true}} {
		got, err := ParseStopAction(tt.in)
		if got != tt.want || (err != nil) != tt.err {
			t.Errorf("ParseStopAction(%q) = %q, %v", tt.in, got, err)
		}
		if err != nil && !strings.Contains(err.Error(), "keep or kill") {
			t.Errorf("ParseStopAction(%q) error %q names no choice", tt.in, err)
		}
	}
	if StopAction("").String() != "keep" || StopKill.String() != "kill" {
		t.Errorf("String: %q %q", StopAction("").String(), StopKill.String())
	}
}

// fakeNetwork records attaches and detaches; only what build steps use is implemented.
type fakeNetwork struct {
	orchestrator.Network
	mu       sync.Mutex
	attached map[string]egress.Policy
	flushed  []string
	err      error
}

func (f *fakeNetwork) Attach(_ context.Context, id string, p egress.Policy) (*network.Attachment, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	f.attached[id] = p
	return &network.Attachment{Netns: "/run/netns/" + id, ResolvConf: "/run/resolv/" + id}, nil
}

func (f *fakeNetwork) Detach(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.attached, id)
	return nil
}

func (f *fakeNetwork) FlushDenied(_ context.Context, id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.flushed = append(f.flushed, id)
}

func TestBuildStepsRunUnderTheTeamsLimitsAndEgress(t *testing.T) {
	no := false
	cfg := Config{SandboxMemoryMB: 768, Quotas: orchestrator.Quotas{Teams: map[string]orchestrator.Quota{
		"small":  {VCPUs: 1, MemoryMB: 256},
		"closed": {Egress: &orchestrator.Egress{AllowInternetAccess: &no, AllowOut: []string{"198.18.0.0/15"}}},
		"broken": {Egress: &orchestrator.Egress{DenyOut: []string{"not-a-cidr/99"}}},
	}}}
	t.Run("limits: the defaults, clamped to the team's quota, and over it an error naming the field", func(t *testing.T) {
		sb := buildSandbox(cfg, nil, stepGuard{})
		if sb.DiskSizeMB != 1024 {
			t.Errorf("disk %d, want the sandbox default 1024", sb.DiskSizeMB)
		}
		for _, tt := range []struct {
			team             string
			cpus, mem        int
			wantCPU, wantMem int
			wantErr          string
		}{
			{"open", 0, 0, 2, 768, ""},
			{"open", 4, 2048, 4, 2048, ""},
			{"small", 0, 0, 1, 256, ""},
			{"small", 2, 0, 0, 0, "cpuCount 2"},
			{"small", 1, 512, 0, 0, "memoryMB 512"},
		} {
			cpus, mem, err := sb.Limits(tt.team, tt.cpus, tt.mem)
			if tt.wantErr != "" {
				if !errors.Is(err, template.ErrInvalid) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("%s %d/%d: %v, want invalid naming %q", tt.team, tt.cpus, tt.mem, err, tt.wantErr)
				}
				continue
			}
			if err != nil || cpus != tt.wantCPU || mem != tt.wantMem {
				t.Errorf("%s %d/%d: %d/%d %v, want %d/%d", tt.team, tt.cpus, tt.mem, cpus, mem, err, tt.wantCPU, tt.wantMem)
			}
		}
	})
	t.Run("a server without networking builds on loopback", func(t *testing.T) {
		if n := buildSandbox(cfg, nil, stepGuard{}).Network("open", 2, 512); n != build.Loopback {
			t.Errorf("network %v, want loopback", n)
		}
	})
	t.Run("steps attach under the team's egress, flush their denials and detach", func(t *testing.T) {
		netw := &fakeNetwork{attached: map[string]egress.Policy{}}
		n := buildSandbox(cfg, netw, stepGuard{}).Network("closed", 2, 512)
		netns, resolv, err := n.Attach(context.Background(), "step-1")
		if err != nil || netns != "/run/netns/step-1" || resolv != "/run/resolv/step-1" {
			t.Fatalf("attach: %q %q %v", netns, resolv, err)
		}
		p := netw.attached["step-1"]
		if p.AllowInternet || p.Team != "closed" || !slices.Equal(p.AllowOutStrings(), []string{"198.18.0.0/15"}) {
			t.Errorf("policy %+v: want the team's, closed but for 198.18.0.0/15", p)
		}
		if s := n.String(); !strings.Contains(s, "internet false") || !strings.Contains(s, "198.18.0.0/15") {
			t.Errorf("String: %q", s)
		}
		if err := n.Detach(context.Background(), "step-1"); err != nil {
			t.Fatal(err)
		}
		if _, left := netw.attached["step-1"]; left || !slices.Equal(netw.flushed, []string{"step-1"}) {
			t.Errorf("after detach: attached %v, flushed %v", netw.attached, netw.flushed)
		}
		if s := buildSandbox(cfg, netw, stepGuard{}).Network("open", 2, 512).String(); !strings.Contains(s, "no egress rules") {
			t.Errorf("an open team's network: %q", s)
		}
	})
	t.Run("a team whose egress does not parse gets no network, and says why", func(t *testing.T) {
		netw := &fakeNetwork{attached: map[string]egress.Policy{}}
		n := buildSandbox(cfg, netw, stepGuard{}).Network("broken", 2, 512)
		if _, _, err := n.Attach(context.Background(), "step-2"); err == nil || len(netw.attached) != 0 {
			t.Errorf("attach: %v, attached %v", err, netw.attached)
		}
		if s := n.String(); !strings.Contains(s, "the team's network: ") {
			t.Errorf("String: %q", s)
		}
	})
	t.Run("each step holds its CPUs and memory in the team's quota while it runs", func(t *testing.T) {
		type held struct {
			team, id  string
			cpus, mem int
		}
		var got []held
		released := 0
		g := stepGuard{reserve: func(team, id string, cpus, memoryMB int) (func(), error) {
			got = append(got, held{team, id, cpus, memoryMB})
			return func() { released++ }, nil
		}}
		n := buildSandbox(cfg, nil, g).Network("open", 3, 768)
		if _, _, err := n.Attach(context.Background(), "step-4"); err != nil {
			t.Fatal(err)
		}
		if err := n.Detach(context.Background(), "step-4"); err != nil {
			t.Fatal(err)
		}
		if want := []held{{"open", "step-4", 3, 768}}; !slices.Equal(got, want) || released != 1 {
			t.Errorf("reserved %+v (released %d), want %+v released once", got, released, want)
		}
	})
	t.Run("an attach the network refuses fails the step", func(t *testing.T) {
		netw := &fakeNetwork{attached: map[string]egress.Policy{}, err: errors.New("pool exhausted")}
		if _, _, err := buildSandbox(cfg, netw, stepGuard{}).Network("open", 2, 512).Attach(context.Background(), "step-3"); err == nil || !strings.Contains(err.Error(), "pool exhausted") {
			t.Errorf("attach: %v", err)
		}
	})
}
