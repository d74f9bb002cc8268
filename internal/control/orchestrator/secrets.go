package orchestrator

import (
	"context"
	"fmt"
	"strings"

	"github.com/cove-dev/cove/internal/control/snapshot"
	"github.com/cove-dev/cove/internal/observe/redact"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/store"
)

// This file: the secrets a sandbox's output is redacted of (its secret env vars and
// metadata, its commands' secret envs, its network rules' secrets, the caller's API key),
// which a client gave only at create or at a command's start, kept sealed in Config.Vault
// under the sandbox's id, so a server that adopts the sandbox after a restart masks them
// too. A snapshot keeps its sandbox's under the snapshot's id, for the sandboxes started
// from it; forks take their parent's.

// keepSecrets seals e's redactor's own secrets under the sandbox's id, now and every time
// it learns one. An error is a create that must not go on: its secrets would be masked only
// until the next restart.
func (o *Orchestrator) keepSecrets(ctx context.Context, e *entry) error {
	if o.cfg.Vault == nil {
		return nil
	}
	id := e.sb.ID
	if err := o.cfg.Vault.Put(id, e.redactor.Own()); err != nil {
		return fmt.Errorf("keep the secrets sandbox %s is redacted of: %w", id, err)
	}
	log := o.logger(ctx)
	e.redactor.OnAdd(func(own []string) {
		if err := o.cfg.Vault.Put(id, own); err != nil {
			log.Error("a secret the sandbox learned is masked but not kept: a server that adopts it after a restart will not mask it", telemetry.KeyError, err.Error())
		}
	})
	return nil
}

// keptRedactor is the redactor of a sandbox this server did not create (adopted after a
// restart, or a copy started from a checkpoint): its own secrets (its access token) plus
// those kept for each of names (the sandbox's own id, or its fork parent's or snapshot's).
func (o *Orchestrator) keptRedactor(ctx context.Context, sb *store.Sandbox, names ...string) *redact.Redactor {
	r := o.sandboxRedactor(sb, CreateRequest{})
	o.addKept(ctx, r, names...)
	return r
}

// addKept adds to r the secrets kept for each of names.
func (o *Orchestrator) addKept(ctx context.Context, r *redact.Redactor, names ...string) {
	if o.cfg.Vault == nil {
		return
	}
	for _, name := range names {
		if name == "" {
			continue
		}
		kept, err := o.cfg.Vault.Get(name)
		if err != nil {
			o.logger(ctx).Error("the sandbox's kept secrets do not open: its output is masked of its access token and known shapes only", "error", err.Error())
		}
		for _, v := range kept {
			r.AddSecret(v)
		}
	}
}

// dropSecrets removes what keepSecrets kept for a sandbox at its end. Caller holds e.mu.
func (o *Orchestrator) dropSecrets(ctx context.Context, e *entry) {
	if o.cfg.Vault == nil {
		return
	}
	if e.redactor != nil {
		e.redactor.OnAdd(nil) // output still draining adds no set back
	}
	if err := o.cfg.Vault.Delete(e.sb.ID); err != nil {
		o.logger(ctx).Error("the killed sandbox's kept secrets were not removed", "error", err.Error())
	}
}

// pruneSecrets removes kept secrets of neither a live sandbox nor a snapshot: what a crash
// between a kill and its cleanup left.
func (o *Orchestrator) pruneSecrets(ctx context.Context) {
	if o.cfg.Vault == nil {
		return
	}
	names, err := o.cfg.Vault.Names()
	if err != nil {
		o.logger(ctx).Error("recover: list kept secrets", "error", err.Error())
		return
	}
	for _, name := range names {
		o.mu.Lock()
		_, live := o.live[strings.TrimSuffix(name, bootEnvSuffix)] // its own, or its reboot's environment
		o.mu.Unlock()
		if live {
			continue
		}
		if snapshot.IsID(name) && o.cfg.Snapshots != nil {
			if _, err := o.cfg.Snapshots.Get(name); err == nil {
				continue
			}
		}
		_ = o.cfg.Vault.Delete(name)
	}
}

// secretsOf is what e's output is masked of beyond the global secrets: its redactor's own,
// or, for a sandbox adopted paused and not restored since (no redactor yet), those kept.
func (o *Orchestrator) secretsOf(ctx context.Context, e *entry) []string {
	e.mu.Lock()
	r := e.redactor
	e.mu.Unlock()
	if r != nil {
		return r.Own()
	}
	return o.keptRedactor(ctx, e.sb, e.sb.ID).Own()
}
