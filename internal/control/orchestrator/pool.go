package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cove-dev/cove/internal/builder/template"
	"github.com/cove-dev/cove/internal/errdefs"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/store"
)

// This file: warm pools. The server keeps started sandboxes per template, their envd
// answering, that belong to no team: no record, no quota, no events, no secrets, and the
// network rules of most creates (nothing but envd runs in them). A create the pool can
// serve claims one: the sandbox becomes the caller's (its record, team, timeout, metadata,
// network rules, inbound settings) and envd's /init gives it the caller's environment and
// access token, as the cold path's /init does. A pooled sandbox's id was never shown to
// anyone: it is the claimer's own.
//
// A pool is never adopted: Detach and Shutdown destroy what is pooled, and a crashed
// server's pooled sandboxes have no record, so the next start's Recover destroys them as
// leftovers. The pool is rebuilt from its sizes.

// DefaultPoolMax bounds one template's pool when Config.PoolMax is 0.
const DefaultPoolMax = 16

// poolEntry is one started, unclaimed sandbox.
type poolEntry struct {
	e     *entry
	gen   string // the template build it was started from (templateGen)
	since time.Time
}

// warmPool is one template's pool.
type warmPool struct {
	target  int
	ready   []*poolEntry
	lastErr string // why the last boot failed; "" after one succeeded
}

// PoolStatus is what one template's warm pool holds.
type PoolStatus struct {
	Template string
	Target   int // asked for
	Ready    int // started, unclaimed
	// LastError is why the last refill failed ("" when it did not).
	LastError string
}

// ParsePools reads --pool flags, each TEMPLATE=N, into sizes by template name.
func ParsePools(flags []string) (map[string]int, error) {
	out := map[string]int{}
	for _, f := range flags {
		name, size, ok := strings.Cut(f, "=")
		n, err := strconv.Atoi(size)
		if !ok || name == "" || err != nil || n < 0 {
			return nil, fmt.Errorf("%q: want TEMPLATE=N, N a count of sandboxes (0 or more)", f)
		}
		out[name] = n
	}
	return out, nil
}

// templateGen names a template's build: a rebuild (new layers, a new start snapshot) makes
// its pooled sandboxes stale.
func templateGen(t *template.Template) string {
	gen := fmt.Sprint(t.CreatedAt.UnixNano(), t.Rootfs, t.LayerDirs, t.BuildID)
	if t.StartSnapshot != nil {
		gen += " " + t.StartSnapshot.BuildID
	}
	return gen
}

// poolable says why a template's sandboxes cannot be pooled ("" when they can): a start
// command that runs at create would run before the caller's environment is known.
func (o *Orchestrator) poolable(t *template.Template) string {
	if t.StartCmd == "" && t.ReadyCmd == "" {
		return ""
	}
	if sn, _ := o.startSnapshot(t, CreateRequest{}); sn != nil {
		return ""
	}
	return "its start command runs at create (the template has no start snapshot)"
}

// initPools sets the pools' sizes: a recorded size (SetPoolSize) wins over the server's
// flag (Config.Pools).
func (o *Orchestrator) initPools() error {
	o.pools = map[string]*warmPool{}
	for name, n := range o.cfg.Pools {
		o.pools[name] = &warmPool{target: min(max(n, 0), o.poolMax())}
	}
	if o.cfg.PoolSizes != nil {
		sizes, err := o.cfg.PoolSizes.PoolSizes(context.Background())
		if err != nil {
			return fmt.Errorf("orchestrator: %w", err)
		}
		for name, n := range sizes {
			o.pools[name] = &warmPool{target: min(max(n, 0), o.poolMax())}
		}
	}
	for name, p := range o.pools {
		telemetry.PoolTarget.WithLabelValues(name).Set(float64(p.target))
		telemetry.PoolReady.WithLabelValues(name).Set(0)
	}
	return nil
}

func (o *Orchestrator) poolMax() int {
	if o.cfg.PoolMax > 0 {
		return o.cfg.PoolMax
	}
	return DefaultPoolMax
}

// SetPoolSize keeps n started sandboxes of template name from now on (0: none), recorded
// in the store (Config.PoolSizes) so that the next server start keeps them too. owner is the caller's
// team: a team sizes the pools of its own templates; "" is the operator, who sizes any.
func (o *Orchestrator) SetPoolSize(ctx context.Context, owner, name string, n int) error {
	if n < 0 || n > o.poolMax() {
		return fmt.Errorf("%w: size %d: a pool holds 0 to %d sandboxes (cove server --pool-max)", ErrInvalid, n, o.poolMax())
	}
	t, err := o.cfg.Templates.Get(name)
	if err == nil && owner != "" && t.TeamID != owner {
		err = template.ErrNotFound // another team's, or the operator's: as E2B, not found
	}
	if errors.Is(err, template.ErrNotFound) {
		return fmt.Errorf("%w: %q", ErrTemplateNotFound, name)
	}
	if err != nil {
		return fmt.Errorf("template %q: %w", name, err)
	}
	if why := o.poolable(t); why != "" && n > 0 {
		return fmt.Errorf("%w: template %s cannot be pooled: %s", ErrInvalid, name, why)
	}
	if owner != "" {
		// A team's pools together hold no more than it may run: its concurrent sandbox
		// quota, or one pool's cap without one.
		limit := o.cfg.Quotas.For(owner).Sandboxes
		if limit <= 0 {
			limit = o.poolMax()
		}
		if held := o.teamPooled(owner, name); held+n > limit {
			return fmt.Errorf("%w: size %d: the team's pools would hold %d sandboxes, over its limit of %d", ErrInvalid, n, held+n, limit)
		}
	}
	if o.cfg.PoolSizes != nil {
		if err := o.cfg.PoolSizes.SetPoolSize(ctx, name, n); err != nil {
			return fmt.Errorf("record the pool size of template %s: %w", name, err)
		}
	}
	o.poolMu.Lock()
	p := o.pools[name]
	if p == nil {
		p = &warmPool{}
		o.pools[name] = p
	}
	p.target = n
	var extra []*poolEntry
	if len(p.ready) > n {
		extra, p.ready = p.ready[n:], p.ready[:n]
	}
	telemetry.PoolTarget.WithLabelValues(name).Set(float64(n))
	telemetry.PoolReady.WithLabelValues(name).Set(float64(len(p.ready)))
	o.poolMu.Unlock()
	for _, pe := range extra {
		o.destroyPooled(ctx, pe, telemetry.PoolResized)
	}
	o.logger(ctx).Info("pool size set", telemetry.KeyTemplateID, name, telemetry.KeyPoolSize, n)
	o.wakePools()
	return nil
}

// teamPooled is the sum of the sizes of team's templates' pools, but except's.
func (o *Orchestrator) teamPooled(team, except string) int {
	o.poolMu.Lock()
	sizes := map[string]int{}
	for name, p := range o.pools {
		if name != except {
			sizes[name] = p.target
		}
	}
	o.poolMu.Unlock()
	n := 0
	for name, size := range sizes {
		if t, err := o.cfg.Templates.Get(name); err == nil && t.TeamID == team {
			n += size
		}
	}
	return n
}

// Pools says what each warm pool holds, by template name. team "" lists every pool; a team
// sees the pools of the templates it may create from.
func (o *Orchestrator) Pools(team string) []PoolStatus {
	o.poolMu.Lock()
	var out []PoolStatus
	for name, p := range o.pools {
		out = append(out, PoolStatus{Template: name, Target: p.target, Ready: len(p.ready), LastError: p.lastErr})
	}
	o.poolMu.Unlock()
	if team != "" {
		out = slices.DeleteFunc(out, func(s PoolStatus) bool {
			t, err := o.cfg.Templates.Get(s.Template)
			return err != nil || !t.VisibleTo(team)
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Template < out[j].Template })
	return out
}

func (o *Orchestrator) wakePools() {
	select {
	case o.poolWake <- struct{}{}:
	default:
	}
}

// poolFiller refills the pools in the background, one boot at a time and at most
// PoolRefillPerSec boots a second, until the server stops.
func (o *Orchestrator) poolFiller() {
	defer o.wg.Done()
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	every := time.Second / 4
	if o.cfg.PoolRefillPerSec > 0 {
		every = time.Duration(float64(time.Second) / o.cfg.PoolRefillPerSec)
	}
	for {
		select {
		case <-o.stop:
			return
		case <-o.poolWake:
		case <-tick.C:
		}
		for o.refillOne() {
			select {
			case <-o.stop:
				return
			case <-time.After(every):
			}
		}
	}
}

// refillOne drops stale pooled sandboxes and boots one for a pool below its size; it
// reports whether it booted one (another may be due).
func (o *Orchestrator) refillOne() bool {
	ctx := o.systemContext()
	var (
		stale []*poolEntry
		due   *template.Template
	)
	o.poolMu.Lock()
	names := make([]string, 0, len(o.pools))
	for name := range o.pools {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		p := o.pools[name]
		t, err := o.cfg.Templates.Get(name)
		if err != nil {
			stale, p.ready = append(stale, p.ready...), nil
			if p.target > 0 {
				p.lastErr = err.Error()
			}
			continue
		}
		gen := templateGen(t)
		p.ready = slices.DeleteFunc(p.ready, func(pe *poolEntry) bool {
			if pe.gen != gen {
				stale = append(stale, pe)
				return true
			}
			return false
		})
		telemetry.PoolReady.WithLabelValues(name).Set(float64(len(p.ready)))
		if due == nil && len(p.ready) < p.target && o.poolsOpen && !o.poolsClosed {
			if why := o.poolable(t); why != "" {
				p.lastErr = why
				continue
			}
			due = t
		}
	}
	o.poolMu.Unlock()
	for _, pe := range stale {
		o.destroyPooled(ctx, pe, telemetry.PoolStale)
	}
	if due == nil {
		return false
	}
	pe, err := o.bootPooled(ctx, due)
	o.poolMu.Lock()
	defer o.poolMu.Unlock()
	p := o.pools[due.Name]
	if err != nil {
		telemetry.PoolBoots.WithLabelValues(due.Name, telemetry.PoolBootFailed).Inc()
		o.logger(ctx).Error("pool refill failed", telemetry.KeyTemplateID, due.Name, telemetry.KeyError, err.Error())
		if p != nil {
			p.lastErr = err.Error()
		}
		return false // the next tick tries again
	}
	telemetry.PoolBoots.WithLabelValues(due.Name, telemetry.PoolBootOK).Inc()
	if p == nil || o.poolsClosed || len(p.ready) >= p.target {
		go o.destroyPooled(ctx, pe, telemetry.PoolResized)
		return false
	}
	p.ready, p.lastErr = append(p.ready, pe), ""
	telemetry.PoolReady.WithLabelValues(due.Name).Set(float64(len(p.ready)))
	return true
}

// bootPooled starts a sandbox of t for its pool (launch): the cold path's steps with no
// team, record or events, under the rules of most creates (E2B's default: the internet, no
// lists), so that their claim changes nothing in the packet filter. Nothing runs in it but
// envd until a claim.
func (o *Orchestrator) bootPooled(ctx context.Context, t *template.Template) (*poolEntry, error) {
	begun := time.Now()
	sb := o.newRecord(ctx, t, 0)
	sb.EndAt, sb.CreatedBy, sb.UpdatedAt = time.Time{}, "", time.Time{} // a claim's
	p := &plan{kind: launchPool, sb: sb, tmpl: t, req: CreateRequest{AllowInternet: true}, begun: begun}
	p.snap, _ = o.startSnapshot(t, CreateRequest{})
	e, _, err := o.launch(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("pool %s: %w", t.Name, err)
	}
	o.logger(sandboxLog(ctx, sb)).Info("pool sandbox ready", telemetry.KeyDurationMS, time.Since(begun).Milliseconds())
	return &poolEntry{e: e, gen: templateGen(t), since: time.Now()}, nil
}

// destroyPooled removes an unclaimed sandbox: its processes, network and log; why ("" for
// a boot that failed) is counted.
func (o *Orchestrator) destroyPooled(ctx context.Context, pe *poolEntry, why string) {
	o.discard(ctx, pe.e, true)
	if why != "" {
		telemetry.PoolDiscarded.WithLabelValues(pe.e.sb.TemplateID, why).Inc()
	}
}

// openPools starts the refills: Recover has swept the sandboxes without a record (an
// earlier server's pool among them), so what is booted from now on stays.
func (o *Orchestrator) openPools() {
	o.poolMu.Lock()
	o.poolsOpen = true
	o.poolMu.Unlock()
	o.wakePools()
}

// closePools destroys every pooled sandbox and stops refills: the server is stopping.
func (o *Orchestrator) closePools(ctx context.Context) {
	o.poolMu.Lock()
	o.poolsClosed = true
	var all []*poolEntry
	for name, p := range o.pools {
		all, p.ready = append(all, p.ready...), nil
		telemetry.PoolReady.WithLabelValues(name).Set(0)
	}
	o.poolMu.Unlock()
	for _, pe := range all {
		o.destroyPooled(ctx, pe, telemetry.PoolStopped)
	}
}

// poolServes says whether a pooled sandbox can serve req: no volumes (they are bound at
// start), and envd's collection limits the same for the caller's team as for no team.
func (o *Orchestrator) poolServes(req CreateRequest) bool {
	if len(req.VolumeMounts) > 0 {
		return false
	}
	return slices.Equal(o.cfg.CollectBudgets.For(o.cfg.Collect, req.TeamID, req.TemplateID).Args(),
		o.cfg.CollectBudgets.For(o.cfg.Collect, "", req.TemplateID).Args())
}

// takePooled hands out a sandbox of t's pool started from t's build, if one is ready.
func (o *Orchestrator) takePooled(t *template.Template) (*poolEntry, bool) {
	o.poolMu.Lock()
	defer o.poolMu.Unlock()
	p := o.pools[t.Name]
	if p == nil || p.target == 0 {
		return nil, false
	}
	gen := templateGen(t)
	for len(p.ready) > 0 {
		pe := p.ready[0]
		p.ready = p.ready[1:]
		telemetry.PoolReady.WithLabelValues(t.Name).Set(float64(len(p.ready)))
		if pe.gen == gen {
			return pe, true
		}
		go o.destroyPooled(o.systemContext(), pe, telemetry.PoolStale)
	}
	return nil, true
}

// giveBack returns an untouched pooled sandbox to its pool (its claim was refused before
// anything of it changed).
func (o *Orchestrator) giveBack(name string, pe *poolEntry) {
	o.poolMu.Lock()
	p := o.pools[name]
	if p != nil && !o.poolsClosed && len(p.ready) < p.target {
		p.ready = append([]*poolEntry{pe}, p.ready...)
		telemetry.PoolReady.WithLabelValues(name).Set(float64(len(p.ready)))
		pe = nil
	}
	o.poolMu.Unlock()
	if pe != nil {
		o.destroyPooled(o.systemContext(), pe, telemetry.PoolResized)
	}
}

// claimPooled serves a create from t's warm pool: ok false sends it down the cold path (no
// pool, none ready, a request a pool cannot serve, or a claim that failed on the way).
func (o *Orchestrator) claimPooled(ctx context.Context, req CreateRequest, t *template.Template, timeout time.Duration, begun time.Time) (*store.Sandbox, bool, error) {
	pe, pooled := o.takePooled(t)
	if !pooled {
		return nil, false, nil
	}
	defer o.wakePools()
	if pe == nil || !o.poolServes(req) {
		if pe != nil {
			o.giveBack(t.Name, pe)
		}
		telemetry.PoolClaims.WithLabelValues(t.Name, telemetry.PoolMiss).Inc()
		return nil, false, nil
	}
	out, err := o.claim(ctx, pe, req, t, timeout, begun)
	var (
		qe   *QuotaError
		gone *GoneError
	)
	switch {
	case errors.As(err, &qe) || errors.Is(err, errdefs.ErrUnavailable):
		o.giveBack(t.Name, pe)
		return nil, true, err // the cold path would be refused the same
	case errors.As(err, &gone):
		return nil, true, err // the server stopped while it was claimed: killed, as a cold create would be
	case err != nil:
		o.destroyPooled(ctx, pe, telemetry.PoolBroken)
		o.logger(ctx).Warn("pooled sandbox claim failed: the create takes the cold path", telemetry.KeyError, err.Error())
		telemetry.PoolClaims.WithLabelValues(t.Name, telemetry.PoolMiss).Inc()
		return nil, false, nil
	}
	telemetry.PoolClaims.WithLabelValues(t.Name, telemetry.PoolHit).Inc()
	return out, true, nil
}

// claim makes pe the caller's sandbox (launch): what Create records and tells envd, on a
// sandbox already running.
func (o *Orchestrator) claim(ctx context.Context, pe *poolEntry, req CreateRequest, t *template.Template, timeout time.Duration, begun time.Time) (*store.Sandbox, error) {
	sb := copySandbox(pe.e.sb)
	now := time.Now()
	sb.StartedAt, sb.EndAt, sb.CreatedBy, sb.UpdatedAt = now, now.Add(timeout), requestID(ctx), now
	ownedBy(sb, req)
	p := &plan{kind: launchClaim, sb: sb, tmpl: t, req: req, timeout: timeout, begun: begun, pooled: pe}
	p.snap, _ = o.startSnapshot(t, CreateRequest{}) // what the pool's sandbox restored, for the created event
	_, out, err := o.launch(ctx, p)
	return out, err
}
