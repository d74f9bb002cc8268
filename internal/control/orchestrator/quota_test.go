package orchestrator

import (
	"context"
	"errors"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cove-dev/cove/internal/errdefs"
	"github.com/cove-dev/cove/internal/store"
)

func TestQuotasRefuseWhatWouldGoOverAndReserveWhatFits(t *testing.T) {
	now := time.Date(2026, 12, 4, 6, 0, 0, 0, time.UTC)
	newO := func(q Quota, live ...*store.Sandbox) *Orchestrator {
		o := &Orchestrator{cfg: Config{Quotas: Quotas{Default: Quota{}, Teams: map[string]Quota{"t1": q}}},
			live: map[string]*entry{}, creating: map[string]reservation{}, rates: map[string]*bucket{}}
		for _, sb := range live {
			o.live[sb.ID] = &entry{sb: sb}
		}
		return o
	}
	sb := func(id, team string) *store.Sandbox {
		return &store.Sandbox{ID: id, TeamID: team, CPUCount: 2, MemoryMB: 512}
	}
	tests := []struct {
		name  string
		o     *Orchestrator
		team  string
		limit string // "" when admitted
	}{
		{"a team under its sandbox count is admitted", newO(Quota{Sandboxes: 2}, sb("a", "t1")), "t1", ""},
		{"a team at its sandbox count is refused", newO(Quota{Sandboxes: 2}, sb("a", "t1"), sb("b", "t1")), "t1", "concurrent sandboxes"},
		{"another team's sandboxes do not count", newO(Quota{Sandboxes: 1}, sb("a", "t2"), sb("b", "t2")), "t1", ""},
		{"a team without a quota entry gets the default, here none", newO(Quota{Sandboxes: 1}, sb("a", "t2")), "t2", ""},
		{"vCPUs over the total are refused", newO(Quota{VCPUs: 3}, sb("a", "t1")), "t1", "vCPUs"},
		{"memory over the total is refused", newO(Quota{MemoryMB: 1000}, sb("a", "t1")), "t1", "memory MB"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.o.admit("new", tt.team, 2, 512, now)
			var qe *QuotaError
			switch {
			case tt.limit == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.limit == "" && tt.o.creating["new"].team != tt.team:
				t.Errorf("admitted but not reserved: %v", tt.o.creating)
			case tt.limit != "" && (!errors.As(err, &qe) || qe.Limit != tt.limit):
				t.Errorf("err %v, want the %s limit", err, tt.limit)
			case tt.limit != "" && len(tt.o.creating) != 0:
				t.Errorf("refused but reserved: %v", tt.o.creating)
			}
		})
	}
	t.Run("creates in flight count before they are live", func(t *testing.T) {
		o := newO(Quota{Sandboxes: 1})
		if err := o.admit("first", "t1", 2, 512, now); err != nil {
			t.Fatal(err)
		}
		if err := o.admit("second", "t1", 2, 512, now); err == nil {
			t.Error("a second concurrent create was admitted past a quota of 1")
		}
	})
	t.Run("the create rate allows a burst of its ceiling, then refuses until tokens refill", func(t *testing.T) {
		o := newO(Quota{CreatesPerSec: 2})
		for i := range 2 {
			if err := o.admit(string(rune('a'+i)), "t1", 1, 1, now); err != nil {
				t.Fatalf("create %d of the burst refused: %v", i+1, err)
			}
		}
		err := o.admit("c", "t1", 1, 1, now)
		if err == nil || !strings.Contains(err.Error(), "limited to 2 per second; retry in 0.5 s") {
			t.Fatalf("third create at once: %v", err)
		}
		if err := o.admit("d", "t1", 1, 1, now.Add(500*time.Millisecond)); err != nil {
			t.Errorf("after half a second: %v", err)
		}
	})
}

func TestParseQuotas(t *testing.T) {
	tests := []struct {
		name, in string
		ok       bool
	}{
		{"a default and a team parse", `{"default":{"sandboxes":20},"teams":{"t1":{"vcpus":8,"memory_mb":4096,"creates_per_sec":1.5}}}`, true},
		{"an unknown field is refused", `{"default":{"sandbox":20}}`, false},
		{"a negative limit is refused", `{"teams":{"t1":{"vcpus":-1}}}`, false},
		{"a team's egress parses", `{"default":{"sandboxes":20},"teams":{"t1":{"vcpus":8,"egress":{"allow_internet_access":false,"allow_out":["198.18.1.2","pkg.example.com"]}}}}`, true},
		{"an egress rule that is neither a CIDR nor a hostname is refused", `{"teams":{"t1":{"egress":{"allow_out":["not an address"]}}}}`, false},
		{"a hostname in deny_out is refused", `{"default":{"egress":{"deny_out":["example.com"]}}}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, err := ParseQuotas(strings.NewReader(tt.in))
			if (err == nil) != tt.ok {
				t.Fatalf("err %v, want ok %v", err, tt.ok)
			}
			if tt.ok && (q.For("t1").VCPUs != 8 || q.For("other").Sandboxes != 20) {
				t.Errorf("quotas %+v", q)
			}
			if p, err := q.For("t1").Egress.Policy("t1"); tt.ok && (err != nil || p.Team != "t1" || (q.For("t1").Egress != nil) == p.AllowInternet) {
				t.Errorf("t1's egress policy %+v, %v", p, err)
			}
		})
	}
}

func TestBuildStepsShareTheTeamsSandboxQuota(t *testing.T) {
	now := time.Date(2026, 12, 4, 6, 0, 0, 0, time.UTC)
	o := &Orchestrator{cfg: Config{Quotas: Quotas{Default: Quota{Sandboxes: 3, CreatesPerSec: 1}}},
		live: map[string]*entry{"a": {sb: &store.Sandbox{ID: "a", TeamID: "t1"}}}, creating: map[string]reservation{}, rates: map[string]*bucket{}}
	var releases []func()
	for _, id := range []string{"build-1", "build-2"} {
		release, err := o.ReserveBuildStep("t1", id, 1, 256)
		if err != nil {
			t.Fatalf("step %s beside one sandbox under a quota of 3: %v", id, err)
		}
		releases = append(releases, release)
	}
	t.Run("a third step is refused: the team holds one sandbox and two steps", func(t *testing.T) {
		var qe *QuotaError
		if _, err := o.ReserveBuildStep("t1", "build-3", 1, 256); !errors.As(err, &qe) || qe.Limit != "concurrent sandboxes" {
			t.Errorf("third step: %v; want the concurrent sandboxes quota", err)
		}
	})
	t.Run("a sandbox create is refused while the steps run", func(t *testing.T) {
		o.mu.Lock()
		err := o.admit("b", "t1", 2, 512, now)
		o.mu.Unlock()
		if err == nil {
			t.Error("create admitted past the quota the steps hold")
		}
	})
	t.Run("a step is charged its CPUs and memory against the team's quotas", func(t *testing.T) {
		o := &Orchestrator{cfg: Config{Quotas: Quotas{Default: Quota{Sandboxes: 10, VCPUs: 4, MemoryMB: 2048}}},
			live: map[string]*entry{"a": {sb: &store.Sandbox{ID: "a", TeamID: "t1", CPUCount: 2, MemoryMB: 512}}}, creating: map[string]reservation{}, rates: map[string]*bucket{}}
		release, err := o.ReserveBuildStep("t1", "step-1", 2, 1024)
		if err != nil {
			t.Fatalf("a 2 vCPU step beside a 2 vCPU sandbox under 4 vCPUs: %v", err)
		}
		var qe *QuotaError
		if _, err := o.ReserveBuildStep("t1", "step-2", 1, 256); !errors.As(err, &qe) || qe.Limit != "vCPUs" {
			t.Errorf("a step past the vCPU quota: %v; want the vCPUs quota", err)
		}
		o.mu.Lock()
		err = o.admit("b", "t1", 1, 1024, now)
		o.mu.Unlock()
		if !errors.As(err, &qe) || qe.Limit != "vCPUs" {
			t.Errorf("a create while the step holds the team's vCPUs: %v", err)
		}
		release()
		if _, err := o.ReserveBuildStep("t1", "step-2", 2, 1600); !errors.As(err, &qe) || qe.Limit != "memory MB" {
			t.Errorf("a step past the memory quota: %v; want the memory quota", err)
		}
	})
	t.Run("a finished step gives its place back, and steps charge no create rate", func(t *testing.T) {
		releases[0]()
		o.mu.Lock()
		err := o.admit("b", "t1", 2, 512, now)
		o.mu.Unlock()
		if err != nil {
			t.Errorf("create after a step ended: %v", err)
		}
	})
}

func TestCreatesAreRefusedWhileTheHostIsShortOfOpenFiles(t *testing.T) {
	if _, err := os.ReadFile("/proc/sys/fs/file-nr"); err != nil {
		t.Skip("no /proc/sys/fs/file-nr")
	}
	now := time.Date(2026, 12, 4, 6, 0, 0, 0, time.UTC)
	newO := func(pct int) *Orchestrator {
		return &Orchestrator{cfg: Config{HostFilesFreePercent: pct}, live: map[string]*entry{}, creating: map[string]reservation{}, rates: map[string]*bucket{}}
	}
	t.Run("a host keeping all its files free refuses with 503 naming open files", func(t *testing.T) {
		_, err := newO(100).reserve(context.Background(), &store.Sandbox{ID: "a", TeamID: "t1"}, now)
		if errdefs.Status(err) != http.StatusServiceUnavailable || !strings.Contains(err.Error(), "open files") {
			t.Errorf("reserve: %v (status %d); want 503 naming open files", err, errdefs.Status(err))
		}
	})
	t.Run("this host, with the default share, admits", func(t *testing.T) {
		release, err := newO(0).reserve(context.Background(), &store.Sandbox{ID: "a", TeamID: "t1"}, now)
		if err != nil {
			t.Fatal(err)
		}
		release()
	})
}
