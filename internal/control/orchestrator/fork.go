package orchestrator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"sync/atomic"
	"time"

	"github.com/cove-dev/cove/internal/builder/template"
	"github.com/cove-dev/cove/internal/control/snapshot"
	"github.com/cove-dev/cove/internal/observe/events"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	"github.com/cove-dev/cove/internal/sandbox/egress"
	"github.com/cove-dev/cove/internal/sandbox/network"
	"github.com/cove-dev/cove/internal/store"
	cove "github.com/cove-dev/cove/sdk"
	"github.com/cove-dev/cove/sdk/reason"
)

// MaxForks bounds one fork call's count.
const MaxForks = 20

// ForkResult is one sandbox of a fork: made, or why not. Each succeeds or fails on its own.
type ForkResult struct {
	Sandbox *store.Sandbox
	Err     error
}

// Fork checkpoints a running sandbox in place (it pauses for that time and keeps its id,
// TTL and processes) and starts count sandboxes from that one checkpoint, each with the
// parent's processes, memory and files, independent from then on, with TTL now+timeout.
func (o *Orchestrator) Fork(ctx context.Context, teamID, id string, count int, timeout time.Duration) ([]ForkResult, error) {
	if count < 1 || count > MaxForks {
		return nil, fmt.Errorf("%w: count must be between 1 and %d, not %d", ErrInvalid, MaxForks, count)
	}
	timeout, err := o.clampTimeout(timeout)
	if err != nil {
		return nil, err
	}
	if o.cfg.Snapshots == nil {
		return nil, fmt.Errorf("%w: this server keeps no snapshots, so it cannot fork", ErrInvalid)
	}
	e, err := o.entryFor(ctx, teamID, id)
	if err != nil {
		return nil, err
	}
	ctx = sandboxLog(ctx, e.sb)
	// The copies mount the parent's volumes, read-only ones as they are; a volume has one
	// writer, so a read-write one refuses the fork before anything is checkpointed.
	mounts, err := o.volumeMountsByID(e.sb.TeamID, id)
	if err != nil {
		return nil, fmt.Errorf("fork %s: %w", id, err)
	}
	for _, m := range mounts {
		if !m.ReadOnly {
			return nil, fmt.Errorf("fork %s: %w: it mounts volume %s read-write at %s, and a volume has one writer, so its copies could not mount it (mount it with readOnly: true to fork)",
				id, ErrConflict, o.volumeName(m.Name), m.Path)
		}
	}
	dir := o.cfg.Snapshots.TempDir()
	defer os.RemoveAll(dir)
	src, _, err := o.exportInPlace(ctx, e, dir, "fork")
	if err != nil {
		return nil, fmt.Errorf("fork %s: %w", id, err)
	}
	from := origin{team: src.TeamID, allowInternet: src.AllowInternet, template: src.TemplateID, metadata: src.Metadata, secure: src.Secure,
		token: src.EnvdAccessToken, autoPause: src.AutoPause, autoResume: src.AutoResume, forkedFrom: id, volumes: mounts, runtime: src.Runtime}
	from.autoPauseKind = src.AutoPauseKind
	from.cpuCount, from.memoryMB, from.diskSizeMB = src.CPUCount, src.MemoryMB, src.DiskSizeMB
	from.network, from.inbound = o.networkConfig(e)
	out := make([]ForkResult, count)
	for i := range out {
		out[i].Sandbox, out[i].Err = o.createFrom(ctx, from, dir, timeout)
	}
	return out, nil
}

// CreateSnapshot checkpoints a running sandbox in place, as Fork does, and keeps the
// checkpoint as a snapshot that new sandboxes start from (Create with its id as template).
func (o *Orchestrator) CreateSnapshot(ctx context.Context, teamID, id, name string) (*snapshot.Snapshot, error) {
	if o.cfg.Snapshots == nil {
		return nil, fmt.Errorf("%w: this server keeps no snapshots", ErrInvalid)
	}
	e, err := o.entryFor(ctx, teamID, id)
	if err != nil {
		return nil, err
	}
	ctx = sandboxLog(ctx, e.sb)
	mounts, err := o.volumeMountsByID(e.sb.TeamID, id)
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", id, err)
	}
	sn := &snapshot.Snapshot{ID: snapshot.NewID(), Name: name, CreatedAt: time.Now().UTC()}
	for _, m := range mounts {
		sn.Volumes = append(sn.Volumes, snapshot.VolumeMount{VolumeID: m.Name, Path: m.Path, ReadOnly: m.ReadOnly})
	}
	dir := o.cfg.Snapshots.Dir(sn.ID)
	src, n, err := o.exportInPlace(ctx, e, dir, "snapshot")
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("snapshot %s: %w", id, err)
	}
	sn.TeamID, sn.SandboxID, sn.TemplateID, sn.Metadata, sn.Runtime = src.TeamID, src.ID, src.TemplateID, src.Metadata, src.Runtime
	sn.Secure, sn.EnvdAccessToken, sn.Bytes = src.Secure, src.EnvdAccessToken, n
	if o.cfg.Vault != nil {
		// Sandboxes started from the snapshot are masked of its sandbox's secrets.
		if err := o.cfg.Vault.Put(sn.ID, o.secretsOf(ctx, e)); err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("snapshot %s: %w", id, err)
		}
	}
	sn.Network, sn.Inbound = o.networkConfig(e)
	if err := o.cfg.Snapshots.Save(sn); err != nil {
		_ = os.RemoveAll(dir)
		if o.cfg.Vault != nil {
			_ = o.cfg.Vault.Delete(sn.ID)
		}
		return nil, err
	}
	o.logger(ctx).Info("snapshot created", telemetry.KeySnapshotID, sn.ID, telemetry.KeySnapshotBytes, n)
	if o.cfg.Mover != nil {
		// On a cluster its files go to the object store too: another node starts copies of it
		// when this one is full or lost. A failed upload leaves copies to this node only.
		begun := time.Now()
		if err := o.cfg.Mover.Upload(ctx, sn.ID, dir); err != nil {
			o.logger(ctx).Warn("snapshot not shared with the other nodes: its copies start on this node only", telemetry.KeySnapshotID, sn.ID, telemetry.KeyError, err.Error())
		} else {
			o.logger(ctx).Info("snapshot shared with the other nodes", telemetry.KeySnapshotID, sn.ID, telemetry.KeyDurationMS, time.Since(begun).Milliseconds())
		}
	}
	return sn, nil
}

// ListSnapshots lists a team's snapshots, newest first, of one sandbox or name when given.
func (o *Orchestrator) ListSnapshots(ctx context.Context, teamID, sandboxID, name string) ([]*snapshot.Snapshot, error) {
	if o.cfg.Snapshots == nil {
		return nil, nil
	}
	// Every node's: on a cluster, one API from any node lists them all.
	return o.cfg.Snapshots.List(snapshot.Filter{TeamID: teamID, SandboxID: sandboxID, Name: name, AllNodes: true})
}

// DeleteSnapshot deletes a team's snapshot; ErrNotFound for another team's or none.
func (o *Orchestrator) DeleteSnapshot(ctx context.Context, teamID, id string) error {
	if o.cfg.Snapshots == nil {
		return fmt.Errorf("%w: snapshot %s", ErrNotFound, id)
	}
	sn, err := o.cfg.Snapshots.Get(id)
	if err != nil && o.cfg.Mover != nil {
		if shared, node, serr := o.cfg.Snapshots.Shared(id); serr == nil && shared.TeamID == teamID {
			return o.deleteSharedSnapshot(ctx, shared, node)
		}
	}
	if err != nil || sn.TeamID != teamID {
		return fmt.Errorf("%w: snapshot %s", ErrNotFound, id)
	}
	if err := o.cfg.Snapshots.Delete(id); err != nil {
		return err
	}
	if o.cfg.Mover != nil {
		o.cfg.Mover.Forget(ctx, id)
	}
	if o.cfg.Vault != nil {
		if err := o.cfg.Vault.Delete(id); err != nil {
			o.logger(ctx).Error("the deleted snapshot's kept secrets were not removed", telemetry.KeySnapshotID, id, telemetry.KeyError, err.Error())
		}
	}
	o.logger(ctx).Info("snapshot deleted", telemetry.KeySnapshotID, id, telemetry.KeySnapshotBytes, sn.Bytes)
	return nil
}

// deleteSharedSnapshot deletes a snapshot whose files are on another node: a live node's
// delete is forwarded there, so this one is lost. Its record and its object store copy go
// now; the node removes its files (and its kept secrets) when it starts again.
func (o *Orchestrator) deleteSharedSnapshot(ctx context.Context, sn *snapshot.Snapshot, node string) error {
	if o.cfg.Mover.NodeAlive(ctx, node) {
		return fmt.Errorf("%w: snapshot %s is on node %s, which deletes it", ErrConflict, sn.ID, node)
	}
	if err := o.cfg.Snapshots.ForgetShared(sn.ID); err != nil {
		return fmt.Errorf("%w: snapshot %s: %v", ErrNotFound, sn.ID, err)
	}
	o.cfg.Mover.Forget(ctx, sn.ID)
	o.logger(ctx).Info("snapshot deleted", telemetry.KeySnapshotID, sn.ID, telemetry.KeySnapshotBytes, sn.Bytes, telemetry.KeyNodeOther, node)
	return nil
}

// exportInPlace checkpoints e (running) and exports the checkpoint to dir, then restores e:
// same id, TTL and processes, paused for the time it takes. A sandbox paused as a snapshot
// is exported as it is. It returns e's record and the bytes exported.
func (o *Orchestrator) exportInPlace(ctx context.Context, e *entry, dir, purpose string) (*store.Sandbox, int64, error) {
	ck, err := o.checkpointer()
	if err != nil {
		return nil, 0, err
	}
	begun := time.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.killed:
		return nil, 0, gone(e.sb)
	case e.onDisk:
		n, err := ck.Export(ctx, e.sb.ID, dir)
		return copySandbox(e.sb), n, err
	case e.sb.State == store.StatePaused && e.sb.PauseKind == reason.PauseFilesystem:
		return nil, 0, fmt.Errorf("%w: sandbox %s is paused without its memory (only its files are kept): resume it first", ErrConflict, e.sb.ID)
	case e.sb.State == store.StatePaused:
		return nil, 0, fmt.Errorf("%w: sandbox %s is frozen: resume it first", ErrConflict, e.sb.ID)
	}
	e.closeAll()
	if e.envd != nil {
		e.envd.CloseIdleConnections()
	}
	e.stopWatching()
	info, err := ck.Checkpoint(ctx, e.sb.ID)
	if err != nil {
		o.watchOOM(ctx, e)
		return nil, 0, fmt.Errorf("checkpoint failed, the sandbox runs on: %w", err)
	}
	telemetry.SnapshotSeconds.Observe(info.Duration.Seconds())
	telemetry.SnapshotBytes.Observe(float64(info.Bytes))
	n, exportErr := ck.Export(ctx, e.sb.ID, dir)
	if _, err := o.restore(ctx, e); err != nil {
		go func() {
			_ = o.kill(o.systemContext(), e, reason.KillResumeFailed, "", "restore after a checkpoint for a "+purpose+": "+err.Error())
		}()
		return nil, 0, errors.Join(exportErr, fmt.Errorf("restore %s after its checkpoint: %w", e.sb.ID, err))
	}
	if exportErr != nil {
		return nil, 0, exportErr
	}
	took := time.Since(begun)
	o.emit(ctx, events.SandboxCheckpointed, e.sb, &cove.CheckpointedEventData{Purpose: purpose, SnapshotBytes: n, DurationMS: took.Milliseconds()})
	o.logger(ctx).Info("sandbox checkpointed", telemetry.KeyPurpose, purpose, telemetry.KeySnapshotBytes, n, telemetry.KeyDurationMS, took.Milliseconds())
	return copySandbox(e.sb), n, nil
}

// origin is what a sandbox started from a checkpoint takes from where it came from.
type origin struct {
	team, template, token  string
	metadata               map[string]string
	secure                 bool
	autoPause, autoResume  bool
	allowInternet          bool // the copy's egress
	network                *egress.Policy
	inbound                network.Inbound // how the proxy reaches its ports (a private copy keeps the token)
	forkedFrom, snapshotID string          // where the copy came from, for the created event
	volumes                []VolumeMount   // the origin's volumes (Name is the id), mounted again at the same paths
	// runtime is the engine the checkpoint was taken on: a copy restores on the same one
	// ("" for a snapshot from before there were two: the template's).
	runtime string
	// moved is the record of a sandbox paused on another node, now resumed on this one under
	// its own id (takeOver); nil for a new sandbox (a fork, a snapshot's start).
	moved *store.Sandbox

	// autoPauseKind is how the copy's TTL auto-pause pauses.
	autoPauseKind reason.PauseKind
	// cpuCount, memoryMB and diskSizeMB are the origin sandbox's size, which its processes
	// were checkpointed with; 0: its template's (a snapshot's start).
	cpuCount, memoryMB, diskSizeMB int
}

// createFromSnapshot starts a sandbox from a snapshot of the caller's team.
func (o *Orchestrator) createFromSnapshot(ctx context.Context, req CreateRequest) (*store.Sandbox, error) {
	var sn *snapshot.Snapshot
	var dir string
	if o.cfg.Snapshots != nil {
		if sn, _ = o.cfg.Snapshots.Get(req.TemplateID); sn != nil {
			dir = o.cfg.Snapshots.Dir(sn.ID)
		}
	}
	if sn == nil && o.cfg.Snapshots != nil && o.cfg.Mover != nil {
		// Another node's: started here from the object store's copy of its files (placement
		// asked its node first; that node is full, draining or lost).
		shared, node, err := o.cfg.Snapshots.Shared(req.TemplateID)
		if err == nil && shared.TeamID == req.TeamID {
			// Its volumes are mounted here too: fetched from the object store, or handed over
			// by the node that holds them (a clear 409 while a sandbox there mounts one).
			fetched, done, err := o.download(ctx, shared.ID)
			if err != nil {
				o.logger(ctx).Warn("another node's snapshot is not in the object store", telemetry.KeySnapshotID, shared.ID, telemetry.KeyNodeOther, node, telemetry.KeyError, err.Error())
			} else {
				defer done()
				sn, dir = shared, fetched
				o.logger(ctx).Info("snapshot fetched from the object store", telemetry.KeySnapshotID, sn.ID, telemetry.KeyNodeOther, node)
			}
		}
	}
	if sn == nil || sn.TeamID != req.TeamID {
		if full, ok := ctx.Value(nodeFullKey{}).(*atomic.Bool); ok && sn == nil {
			full.Store(true) // a snapshot's files are on the node it was taken on: try the others
		}
		return nil, fmt.Errorf("%w: snapshot %q", ErrTemplateNotFound, req.TemplateID)
	}
	timeout, err := o.clampTimeout(req.Timeout)
	if err != nil {
		return nil, err
	}
	md := sn.Metadata
	if len(req.Metadata) > 0 {
		md = req.Metadata
	}
	if len(req.EnvVars) > 0 {
		// envd comes back with the snapshot's memory, and its environment with it.
		o.logger(ctx).Info("envVars ignored: a sandbox from a snapshot keeps the snapshot's environment", telemetry.KeyEnvNames, len(req.EnvVars))
	}
	if len(req.VolumeMounts) > 0 {
		return nil, fmt.Errorf("%w: volumeMounts: a sandbox from a snapshot mounts the snapshot's volumes, at the paths its processes use", ErrInvalid)
	}
	from := origin{team: sn.TeamID, template: sn.TemplateID, token: sn.EnvdAccessToken, metadata: md, runtime: sn.Runtime,
		secure: sn.Secure, autoPause: req.AutoPause, autoResume: req.AutoResume, snapshotID: sn.ID, allowInternet: req.AllowInternet,
		network: req.Network, inbound: network.Inbound{MaskRequestHost: req.MaskRequestHost, HTTPSPorts: req.HTTPSPorts}}
	from.autoPauseKind = req.AutoPauseKind
	for _, m := range sn.Volumes {
		from.volumes = append(from.volumes, VolumeMount{Name: m.VolumeID, Path: m.Path, ReadOnly: m.ReadOnly})
	}
	if req.PrivateTraffic {
		from.inbound.TrafficToken = randomHex(16)
	}
	if req.Network == nil && sn.Network != nil {
		// The snapshot's rules, unless the create names its own; internet access only if both
		// the snapshot's sandbox had it and the create does not turn it off.
		from.network, from.allowInternet = sn.Network, sn.Network.AllowInternet && req.AllowInternet
		if !req.PrivateTraffic && req.MaskRequestHost == "" && len(req.HTTPSPorts) == 0 {
			from.inbound = sn.Inbound
		}
	}
	return o.createFrom(ctx, from, dir, timeout)
}

// createFrom starts a new sandbox from an exported checkpoint in dir (launch): its processes
// and memory, its files on its template, envd already set up (its token the origin's), and
// the origin's size, engine, network and volumes.
func (o *Orchestrator) createFrom(ctx context.Context, from origin, dir string, timeout time.Duration) (*store.Sandbox, error) {
	begun := time.Now()
	tmpl, err := o.cfg.Templates.Get(from.template)
	if err != nil {
		if errors.Is(err, template.ErrNotFound) {
			return nil, fmt.Errorf("%w: %q, the template under the checkpoint, was removed", ErrTemplateNotFound, from.template)
		}
		return nil, err
	}
	p := &plan{kind: launchCopy, tmpl: tmpl, timeout: timeout, begun: begun, checkpoint: dir, originVolumes: true,
		forkedFrom: from.forkedFrom, snapshotID: from.snapshotID, moved: from.moved}
	if from.moved != nil {
		// The same sandbox, come to this node: its id, token and record, running again here.
		p.kind, p.sb = launchMove, copySandbox(from.moved)
		now := time.Now()
		p.sb.Node, p.sb.State, p.sb.PausedAt, p.sb.PauseKind = o.cfg.Node, store.StateRunning, nil, ""
		p.sb.EndAt, p.sb.UpdatedAt = now.Add(timeout), now
		p.kept = []string{p.sb.ID} // its own, which the node it left kept in the shared store
	} else {
		// A copy: the origin's size (its record's; a snapshot's, its template's), engine,
		// settings and token; its own id and TTL.
		p.sb = o.newRecord(ctx, tmpl, timeout)
		p.sb.TemplateID, p.sb.TeamID, p.sb.Metadata = from.template, from.team, maps.Clone(from.metadata)
		p.sb.CPUCount, p.sb.MemoryMB, p.sb.DiskSizeMB = cmp.Or(from.cpuCount, p.sb.CPUCount), cmp.Or(from.memoryMB, p.sb.MemoryMB), cmp.Or(from.diskSizeMB, p.sb.DiskSizeMB)
		p.sb.Runtime = cmp.Or(from.runtime, p.sb.Runtime)
		p.sb.Secure, p.sb.EnvdAccessToken, p.sb.AutoPause, p.sb.AutoResume, p.sb.AutoPauseKind = from.secure, from.token, from.autoPause, from.autoResume, from.autoPauseKind
		if p.sb.Metadata == nil {
			p.sb.Metadata = map[string]string{}
		}
		// The copy's processes hold its origin's secrets (env, memory): it is masked of them.
		p.kept = []string{from.forkedFrom, from.snapshotID}
	}
	// The copy's processes come back in a network of its own, with the same mounts
	// (resolv.conf, the CA bundle) as the sandbox they were checkpointed in, and its rules;
	// its processes may hold files open on the origin's volumes: the same volumes at the same
	// paths, or no copy.
	p.req = CreateRequest{TeamID: p.sb.TeamID, TemplateID: p.sb.TemplateID, AllowInternet: from.allowInternet, Network: from.network,
		PrivateTraffic: from.inbound.TrafficToken != "", trafficToken: from.inbound.TrafficToken, MaskRequestHost: from.inbound.MaskRequestHost,
		HTTPSPorts: from.inbound.HTTPSPorts, VolumeMounts: from.volumes}
	if from.network != nil {
		p.req.Secrets = from.network.Secrets()
	}
	_, out, err := o.launch(ctx, p)
	return out, err
}
