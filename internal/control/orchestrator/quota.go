package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"time"

	"github.com/cove-dev/cove/internal/errdefs"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/sandbox/egress"
	"github.com/cove-dev/cove/internal/store"
	cove "github.com/cove-dev/cove/sdk"
)

// Quota bounds what one team may hold at once and how fast it may create. Zero means no
// limit. Paused sandboxes count: a freeze keeps their memory.
type Quota struct {
	Sandboxes int `json:"sandboxes"` // running and paused sandboxes at once
	VCPUs     int `json:"vcpus"`     // their vCPUs in all
	MemoryMB  int `json:"memory_mb"` // their memory in all
	// CreatesPerSec is the sustained create rate; a team may create up to its ceiling (at
	// least one) at once.
	CreatesPerSec float64 `json:"creates_per_sec"`
	Volumes       int     `json:"volumes"`   // volumes the team holds
	VolumeMB      int     `json:"volume_mb"` // their sizes in all
	// Egress is the network policy the team's template builds run under; nil lets their
	// steps reach the internet, as a sandbox does by default.
	Egress *Egress `json:"egress,omitempty"`
}

// Egress is a team's network policy in E2B's words: allow_internet_access false denies
// everything allow_out does not name; deny_out takes CIDRs and addresses, allow_out also
// hostnames.
type Egress struct {
	AllowInternetAccess *bool    `json:"allow_internet_access,omitempty"`
	AllowOut            []string `json:"allow_out,omitempty"`
	DenyOut             []string `json:"deny_out,omitempty"`
}

// Policy is e as a network policy of team; a nil e is open. Errors name the field.
func (e *Egress) Policy(team string) (egress.Policy, error) {
	if e == nil {
		return egress.Policy{AllowInternet: true, Team: team}, nil
	}
	p, err := egress.ParsePolicy(egress.Spec{AllowInternet: e.AllowInternetAccess, AllowOut: e.AllowOut, DenyOut: e.DenyOut}, true)
	p.Team = team
	return p, err
}

// Quotas is every team's quota: Default, overridden whole by Teams[id].
type Quotas struct {
	Default Quota            `json:"default"`
	Teams   map[string]Quota `json:"teams"`
}

// For returns team's quota.
func (q Quotas) For(team string) Quota {
	if t, ok := q.Teams[team]; ok {
		return t
	}
	return q.Default
}

// ParseQuotas reads {"default":{...},"teams":{"<id>":{...}}}, refusing unknown fields and
// negative limits.
func ParseQuotas(r io.Reader) (Quotas, error) {
	var q Quotas
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&q); err != nil {
		return Quotas{}, fmt.Errorf("quotas: %w", err)
	}
	for name, t := range q.Teams {
		if err := t.valid(); err != nil {
			return Quotas{}, fmt.Errorf("quotas: team %s: %w", name, err)
		}
	}
	if err := q.Default.valid(); err != nil {
		return Quotas{}, fmt.Errorf("quotas: default: %w", err)
	}
	return q, nil
}

func (q Quota) valid() error {
	if q.Sandboxes < 0 || q.VCPUs < 0 || q.MemoryMB < 0 || q.CreatesPerSec < 0 || math.IsNaN(q.CreatesPerSec) || q.Volumes < 0 || q.VolumeMB < 0 {
		return errors.New("limits must not be negative")
	}
	if _, err := q.Egress.Policy(""); err != nil {
		return fmt.Errorf("egress: %w", err)
	}
	return nil
}

// QuotaError says a create was refused by the team's quota; the API answers 429.
type QuotaError struct {
	Limit string // one of the quota* names below
	Have  float64
	Max   float64
}

// The limits a QuotaError names.
const (
	quotaSandboxes = "concurrent sandboxes"
	quotaVCPUs     = "vCPUs"
	quotaMemory    = "memory MB"
	quotaCreates   = "creates per second"
)

func (e *QuotaError) Error() string {
	if e.Limit == quotaCreates {
		return fmt.Sprintf("team quota: sandbox creates are limited to %g per second; retry in %.1f s", e.Max, e.Have)
	}
	return fmt.Sprintf("team quota: this sandbox would make %g %s, over the team's limit of %g", e.Have, e.Limit, e.Max)
}

// reservation is a create in flight, counted against its team until it is live or failed.
type reservation struct {
	team            string
	vcpus, memoryMB int
}

// bucket is a team's create-rate token bucket.
type bucket struct {
	tokens float64
	at     time.Time
}

// admit checks team's quota for one more sandbox of cpus and memoryMB and, when it fits,
// reserves it under id; release(id) gives it back. o.mu must be held.
func (o *Orchestrator) admit(id, team string, cpus, memoryMB int, now time.Time) error {
	if err := o.fits(team, cpus, memoryMB); err != nil {
		return err
	}
	q := o.cfg.Quotas.For(team)
	if rate := q.CreatesPerSec; rate > 0 {
		burst := max(1, math.Ceil(rate))
		b, ok := o.rates[team]
		if !ok {
			b = &bucket{tokens: burst, at: now}
			o.rates[team] = b
		}
		b.tokens = min(burst, b.tokens+now.Sub(b.at).Seconds()*rate)
		b.at = now
		if b.tokens < 1 {
			return &QuotaError{Limit: quotaCreates, Have: (1 - b.tokens) / rate, Max: rate}
		}
		b.tokens--
	}
	o.creating[id] = reservation{team: team, vcpus: cpus, memoryMB: memoryMB}
	return nil
}

// fits says whether one more sandbox of cpus and memoryMB keeps team within its quota's
// concurrent limits, counting its live sandboxes, creates in flight and running build
// steps. o.mu must be held.
func (o *Orchestrator) fits(team string, cpus, memoryMB int) error {
	q := o.cfg.Quotas.For(team)
	n, c, m := 1, cpus, memoryMB
	for _, e := range o.live {
		if e.sb.TeamID == team {
			n, c, m = n+1, c+e.sb.CPUCount, m+e.sb.MemoryMB
		}
	}
	for _, r := range o.creating {
		if r.team == team {
			n, c, m = n+1, c+r.vcpus, m+r.memoryMB
		}
	}
	switch {
	case q.Sandboxes > 0 && n > q.Sandboxes:
		return &QuotaError{Limit: quotaSandboxes, Have: float64(n), Max: float64(q.Sandboxes)}
	case q.VCPUs > 0 && c > q.VCPUs:
		return &QuotaError{Limit: quotaVCPUs, Have: float64(c), Max: float64(q.VCPUs)}
	case q.MemoryMB > 0 && m > q.MemoryMB:
		return &QuotaError{Limit: quotaMemory, Have: float64(m), Max: float64(q.MemoryMB)}
	}
	return nil
}

// ReserveBuildStep counts a running step of team's template build, with its cpus and
// memoryMB, as one of its sandboxes, under the step's id, until release: builds and
// sandboxes share the team's concurrent sandbox, vCPU and memory quotas (a step past one
// fails with a *QuotaError). A step is no create: the create rate is not charged.
func (o *Orchestrator) ReserveBuildStep(team, id string, cpus, memoryMB int) (release func(), err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.fits(team, cpus, memoryMB); err != nil {
		return nil, err
	}
	o.creating[id] = reservation{team: team, vcpus: cpus, memoryMB: memoryMB}
	return func() {
		o.mu.Lock()
		delete(o.creating, id)
		o.mu.Unlock()
	}, nil
}

// Unwrap makes a quota refusal a resource-exhausted error: 429 in E2B's shape.
func (e *QuotaError) Unwrap() error { return errdefs.ErrResourceExhausted }

// reserve admits sb against its team's quotas (as admit) and returns the release of its
// reservation, for when it is registered live or its create failed.
func (o *Orchestrator) reserve(ctx context.Context, sb *store.Sandbox, now time.Time) (release func(), err error) {
	if err := o.hostFilesFree(); err != nil {
		telemetry.SandboxCreateFailures.WithLabelValues("host_files").Inc()
		o.limits.Reached(ctx, sb.TeamID, "", sb.TemplateID, cove.LimitHostFiles, err.Error())
		return nil, err
	}
	o.mu.Lock()
	err = o.admit(sb.ID, sb.TeamID, sb.CPUCount, sb.MemoryMB, now)
	o.mu.Unlock()
	if err != nil {
		telemetry.SandboxCreateFailures.WithLabelValues("quota").Inc()
		o.quotaRefused(ctx, sb, err)
		return nil, err
	}
	unadmit := func() {
		o.mu.Lock()
		delete(o.creating, sb.ID)
		o.mu.Unlock()
	}
	settle, err := o.place(ctx, sb)
	if err != nil {
		unadmit()
		return nil, err
	}
	return func() {
		unadmit()
		settle()
	}, nil
}

// hostFilesFree refuses a new sandbox while the host's open files (fs.file-nr) leave less
// than HostFilesFreePercent of fs.file-max free: one sandbox may hold about a million
// files (runtime.DefaultNoFile times its pids), and a host out of them fails everyone's.
func (o *Orchestrator) hostFilesFree() error {
	pct := o.cfg.HostFilesFreePercent
	if pct == 0 {
		pct = 10
	}
	if pct < 0 {
		return nil
	}
	b, err := os.ReadFile("/proc/sys/fs/file-nr")
	if err != nil {
		return nil // no procfs to read: nothing to bound by
	}
	var used, unused, limit int64
	if _, err := fmt.Sscan(string(b), &used, &unused, &limit); err != nil || limit <= 0 {
		return nil
	}
	if free := limit - used; free*100 < limit*int64(pct) {
		return fmt.Errorf("%w: the host has %d of its %d open files free, under the %d%% kept for running sandboxes; retry when sandboxes end",
			errdefs.ErrUnavailable, free, limit, pct)
	}
	return nil
}
