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
	"github.com/cove-dev/cove/internal/errdefs"
	"github.com/cove-dev/cove/internal/sandbox/runtime"

	"github.com/cove-dev/cove/internal/observe/telemetry"
	cove "github.com/cove-dev/cove/sdk"
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
		if err := o.cfg.Volumes.Attach(ctx, vol, sandboxID, p, m.ReadOnly, o.holdsVolumes); err != nil {
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

// holdsVolumes reports whether sandbox id, in creation or live and not killed, still holds
// the volumes it mounts.
func (o *Orchestrator) holdsVolumes(id string) bool {
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

// CreateVolume makes a team's volume of sizeMB MiB (0: the server's default size; a server
// whose default is 0 makes plain directories without a quota).
func (o *Orchestrator) CreateVolume(ctx context.Context, teamID, name string, sizeMB int) (*snapshot.Volume, error) {
	if o.cfg.Volumes == nil {
		return nil, fmt.Errorf("%w: this server keeps no volumes", ErrInvalid)
	}
	if sizeMB == 0 {
		sizeMB = o.cfg.VolumeSizeMB
	}
	q := o.cfg.Quotas.For(teamID)
	floor := o.cfg.VolumeFreeFloorMB
	if floor == 0 {
		floor = 1024
	}
	lim := snapshot.VolumeLimits{Count: q.Volumes, Bytes: int64(q.VolumeMB) << 20, FreeFloor: int64(max(0, floor)) << 20}
	vol, err := o.cfg.Volumes.Create(teamID, name, int64(sizeMB)<<20, lim)
	switch {
	case errors.Is(err, snapshot.ErrVolumeQuota):
		o.logger(ctx).Warn("volume refused: team quota", telemetry.KeyVolumeName, name, telemetry.KeyError, err.Error())
		o.limits.Reached(ctx, teamID, "", "", cove.LimitTeamVolumes, err.Error())
		return nil, fmt.Errorf("%w: %v", errdefs.ErrResourceExhausted, err)
	case errors.Is(err, snapshot.ErrVolumeNoSpace):
		o.logger(ctx).Warn("volume refused: host disk", telemetry.KeyVolumeName, name, telemetry.KeyError, err.Error())
		o.limits.Reached(ctx, teamID, "", "", cove.LimitHostVolumes, err.Error())
		return nil, fmt.Errorf("%w: sizeMB: %v", errdefs.ErrNoSpace, err)
	case errors.Is(err, snapshot.ErrVolumeName):
		return nil, fmt.Errorf("%w: name: %v", ErrInvalid, err)
	case errors.Is(err, snapshot.ErrVolumeSize):
		return nil, fmt.Errorf("%w: sizeMB: %v", ErrInvalid, err)
	case errors.Is(err, snapshot.ErrVolumeExists):
		return nil, fmt.Errorf("%w: %v", ErrConflict, err)
	case err != nil:
		return nil, err
	}
	o.logger(ctx).Info("volume created", telemetry.KeyVolumeID, vol.ID, telemetry.KeyVolumeName, vol.Name, telemetry.KeyVolumeSizeBytes, vol.SizeBytes)
	return vol, nil
}

// Volume returns a team's volume by id or name.
func (o *Orchestrator) Volume(ctx context.Context, teamID, id string) (*snapshot.Volume, error) {
	if o.cfg.Volumes == nil {
		return nil, fmt.Errorf("%w: volume %s", ErrNotFound, id)
	}
	vol, err := o.cfg.Volumes.Get(teamID, id)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotFound, err)
	}
	return vol, nil
}

// ListVolumes lists a team's volumes.
func (o *Orchestrator) ListVolumes(ctx context.Context, teamID string) ([]*snapshot.Volume, error) {
	if o.cfg.Volumes == nil {
		return nil, nil
	}
	return o.cfg.Volumes.List(teamID)
}

// VolumeMountsOf returns the volumes a team's sandbox mounts (E2B's volumeMounts of its info).
func (o *Orchestrator) VolumeMountsOf(ctx context.Context, teamID, sandboxID string) ([]VolumeMount, error) {
	return o.volumeMounts(teamID, sandboxID, func(v *snapshot.Volume) string { return v.Name })
}

// volumeMountsByID returns the volumes sandbox sandboxID mounts, each named by the volume's
// id: what a copy of it mounts again.
func (o *Orchestrator) volumeMountsByID(teamID, sandboxID string) ([]VolumeMount, error) {
	return o.volumeMounts(teamID, sandboxID, func(v *snapshot.Volume) string { return v.ID })
}

// volumeMounts returns the volumes a sandbox mounts as its leases say (an adopted sandbox's
// too), each named as name says.
func (o *Orchestrator) volumeMounts(teamID, sandboxID string, name func(*snapshot.Volume) string) ([]VolumeMount, error) {
	if o.cfg.Volumes == nil {
		return nil, nil
	}
	mounts, err := o.cfg.Volumes.MountsOf(teamID, sandboxID)
	if err != nil {
		return nil, err
	}
	out := make([]VolumeMount, 0, len(mounts))
	for _, m := range mounts {
		out = append(out, VolumeMount{Name: name(m.Volume), Path: m.Path, ReadOnly: m.ReadOnly})
	}
	return out, nil
}

// releaseVolumes unmounts the sized volumes no sandbox of this server still mounts: the last
// step of a stop, after the sandboxes were killed or let go.
func (o *Orchestrator) releaseVolumes(ctx context.Context) {
	if o.cfg.Volumes == nil {
		return
	}
	ids, err := o.cfg.Volumes.UnmountIdle(o.holdsVolumes)
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
		err := o.cfg.Volumes.Release(ctx, id, o.holdsVolumes)
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

// ReleaseVolume publishes volume id to the object store and lets go of it, for another node
// that mounts it next: ErrConflict, naming the sandbox, while a sandbox here mounts it.
func (o *Orchestrator) ReleaseVolume(ctx context.Context, id string) error {
	if o.cfg.Volumes == nil {
		return fmt.Errorf("%w: volume %s", ErrNotFound, id)
	}
	begun := time.Now()
	if err := o.cfg.Volumes.Release(ctx, id, o.holdsVolumes); errors.Is(err, snapshot.ErrVolumeInUse) {
		return fmt.Errorf("%w: %v", ErrConflict, err)
	} else if err != nil {
		return err
	}
	o.logger(ctx).Info("volume released to another node", telemetry.KeyVolumeID, id, telemetry.KeyDurationMS, time.Since(begun).Milliseconds())
	return nil
}

// volumeName is volume id's name, or the id of a volume gone.
func (o *Orchestrator) volumeName(id string) string {
	if vol, err := o.cfg.Volumes.ByID(id); err == nil {
		return vol.Name
	}
	return id
}

// VolumeByID returns a volume by id, of whichever team: the content API authenticates by
// the volume's own token.
func (o *Orchestrator) VolumeByID(ctx context.Context, id string) (*snapshot.Volume, error) {
	if o.cfg.Volumes == nil {
		return nil, fmt.Errorf("%w: volume %s", ErrNotFound, id)
	}
	vol, err := o.cfg.Volumes.ByID(id)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotFound, err)
	}
	return vol, nil
}

// VolumeFiles opens a volume's content; close it after use.
func (o *Orchestrator) VolumeFiles(ctx context.Context, vol *snapshot.Volume) (*snapshot.Files, error) {
	return o.cfg.Volumes.Files(vol)
}

// VolumeUsage returns the bytes a volume's files take (0 for a volume without a size).
func (o *Orchestrator) VolumeUsage(ctx context.Context, vol *snapshot.Volume) (int64, error) {
	return o.cfg.Volumes.Usage(vol)
}

// DeleteVolume deletes a team's volume and its files; ErrConflict while a live sandbox
// mounts it (one adopted after a restart included: mounts are leases on disk).
func (o *Orchestrator) DeleteVolume(ctx context.Context, teamID, id string) error {
	vol, err := o.Volume(ctx, teamID, id)
	if err != nil {
		return err
	}
	err = o.cfg.Volumes.Delete(teamID, vol.ID, o.holdsVolumes)
	switch {
	case errors.Is(err, snapshot.ErrVolumeInUse):
		return fmt.Errorf("%w: %v", ErrConflict, err)
	case err != nil:
		return err
	}
	o.logger(ctx).Info("volume deleted", telemetry.KeyVolumeID, vol.ID, telemetry.KeyVolumeName, vol.Name)
	return nil
}
