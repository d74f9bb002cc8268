package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/cove-dev/cove/internal/control/snapshot"
	"github.com/cove-dev/cove/internal/sandbox/runtime"

	"github.com/cove-dev/cove/internal/observe/telemetry"
)

// VolumeMount mounts a team's volume (by name or id) at an absolute path in a sandbox,
// read-only when asked (a volume is mounted read-write by one live sandbox at a time).
type VolumeMount struct {
	Name, Path string
	ReadOnly   bool
}

// volumeBinds resolves a create's volume mounts to bind mounts and the volumes' ids.
func (o *Orchestrator) volumeBinds(ctx context.Context, teamID, sandboxID string, mounts []VolumeMount) ([]runtime.Bind, []string, error) {
	if len(mounts) == 0 {
		return nil, nil, nil
	}
	if o.cfg.Volumes == nil {
		return nil, nil, fmt.Errorf("%w: volumeMounts: this server keeps no volumes", ErrInvalid)
	}
	var binds []runtime.Bind
	var ids, paths []string
	for i, m := range mounts {
		p := path.Clean(m.Path)
		if !path.IsAbs(m.Path) || p == "/" || reservedMountPath(p) || slices.Contains(paths, p) {
			return nil, nil, fmt.Errorf("%w: volumeMounts[%d].path: %q must be absolute, not /, not under %s, and used once",
				ErrInvalid, i, m.Path, strings.Join(reservedMountPaths, ", "))
		}
		vol, err := o.cfg.Volumes.Get(teamID, m.Name)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: volumeMounts: %w", ErrInvalid, err)
		}
		// Held on this node (in a cluster, fetched when another node had it) and claimed.
		// The lease lasts while the sandbox does: a failed create leaves one that no live
		// sandbox holds, which the next claim sweeps.
		if err := o.cfg.Volumes.Attach(ctx, vol, sandboxID, p, m.ReadOnly, o.HoldsVolumes); err != nil {
			if errors.Is(err, snapshot.ErrVolumeBusy) || errors.Is(err, snapshot.ErrVolumeInUse) || errors.Is(err, snapshot.ErrVolumeLost) {
				return nil, nil, fmt.Errorf("%w: volumeMounts: %v", ErrConflict, err)
			}
			if errors.Is(err, snapshot.ErrVolumeNotFound) {
				return nil, nil, fmt.Errorf("%w: volumeMounts: %w", ErrInvalid, err)
			}
			return nil, nil, err
		}
		binds = append(binds, runtime.Bind{Source: o.cfg.Volumes.DataDir(vol.ID), Target: p, ReadOnly: m.ReadOnly})
		ids, paths = append(ids, vol.ID), append(paths, p)
	}
	return binds, ids, nil
}

// reservedMountPaths are the sandbox's own: the kernel's and the runtime's filesystems, and
// Cove's binary. A volume mounted over one would hide what the sandbox needs, or fail.
var reservedMountPaths = []string{"/.cove", "/proc", "/sys", "/dev", "/run"}

// reservedMountPath says clean path p is, or lies under, a reserved path.
func reservedMountPath(p string) bool {
	for _, r := range reservedMountPaths {
		if p == r || strings.HasPrefix(p, r+"/") {
			return true
		}
	}
	return false
}

// HoldsVolumes reports whether sandbox id, in creation or live and not killed, still holds
// the volumes it mounts.
func (o *Orchestrator) HoldsVolumes(id string) bool {
	o.mu.Lock()
	_, creating := o.creating[id]
	e := o.live[id]
	o.mu.Unlock()
	if creating {
		return true
	}
	if e == nil {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return !e.killed
}

// volumeMountsByID returns the volumes sandbox sandboxID mounts as its leases say (an
// adopted sandbox's too), each named by the volume's id: what a copy of it mounts again, and
// what its end or move lets go of.
func (o *Orchestrator) volumeMountsByID(teamID, sandboxID string) ([]VolumeMount, error) {
	if o.cfg.Volumes == nil {
		return nil, nil
	}
	mounts, err := o.cfg.Volumes.MountsOf(teamID, sandboxID)
	if err != nil {
		return nil, err
	}
	out := make([]VolumeMount, 0, len(mounts))
	for _, m := range mounts {
		out = append(out, VolumeMount{Name: m.Volume.ID, Path: m.Path, ReadOnly: m.ReadOnly})
	}
	return out, nil
}

// releaseVolumes unmounts the sized volumes no sandbox of this server still mounts: the last
// step of a stop, after the sandboxes were killed or let go.
func (o *Orchestrator) releaseVolumes(ctx context.Context) {
	if o.cfg.Volumes == nil {
		return
	}
	ids, err := o.cfg.Volumes.UnmountIdle(o.HoldsVolumes)
	if err != nil {
		o.logger(ctx).Error("volumes left mounted at the stop", telemetry.KeyError, err.Error())
	}
	if len(ids) > 0 {
		o.logger(ctx).Info("volumes unmounted at the stop", telemetry.KeyVolumes, len(ids))
	}
}

// publishVolumes, in a cluster, publishes to the object store each volume of sandbox
// sandboxID (ids, as this server made it; its leases, for one adopted after a restart) that
// no sandbox of this node mounts any more (its kill let go of them), so any node can mount
// them next and a loss of this node loses none of their files. One box keeps its volumes
// where they are.
func (o *Orchestrator) publishVolumes(ctx context.Context, teamID, sandboxID string, ids []string) {
	if o.cfg.Volumes == nil || !o.cfg.Volumes.Shared() {
		return
	}
	if len(ids) == 0 {
		mounts, _ := o.volumeMountsByID(teamID, sandboxID)
		for _, m := range mounts {
			ids = append(ids, m.Name)
		}
	}
	for _, id := range ids {
		begun := time.Now()
		err := o.cfg.Volumes.Release(ctx, id, o.HoldsVolumes)
		switch {
		case errors.Is(err, snapshot.ErrVolumeInUse):
			// Another sandbox here mounts it: it is published when that one lets go.
		case err != nil:
			o.logger(ctx).Warn("volume not published: it stays on this node", telemetry.KeyVolumeID, id, telemetry.KeyError, err.Error())
		default:
			o.logger(ctx).Info("volume published", telemetry.KeyVolumeID, id, telemetry.KeyDurationMS, time.Since(begun).Milliseconds())
		}
	}
}

// volumeName is volume id's name, or the id of a volume gone.
func (o *Orchestrator) volumeName(id string) string {
	if vol, err := o.cfg.Volumes.ByID(id); err == nil {
		return vol.Name
	}
	return id
}
