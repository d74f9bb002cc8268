package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/cove-dev/cove/internal/runtime"
	"github.com/cove-dev/cove/internal/snapshot"

	"github.com/cove-dev/cove/internal/telemetry"
)

// VolumeMount mounts a team's volume (by name or id) at an absolute path in a sandbox.
type VolumeMount struct {
	Name, Path string
}

// volumeBinds resolves a create's volume mounts to bind mounts and the volumes' ids.
func (o *Orchestrator) volumeBinds(teamID string, mounts []VolumeMount) ([]runtime.Bind, []string, error) {
	if len(mounts) == 0 {
		return nil, nil, nil
	}
	if o.cfg.Volumes == nil {
		return nil, nil, fmt.Errorf("%w: volumeMounts: this server keeps no volumes", ErrInvalid)
	}
	var binds []runtime.Bind
	var ids, paths []string
	for _, m := range mounts {
		p := path.Clean(m.Path)
		if !path.IsAbs(m.Path) || p == "/" || p == "/.cove" || strings.HasPrefix(p, "/.cove/") || slices.Contains(paths, p) {
			return nil, nil, fmt.Errorf("%w: volumeMounts: path %q must be absolute, not /, not under /.cove, and used once", ErrInvalid, m.Path)
		}
		vol, err := o.cfg.Volumes.Get(teamID, m.Name)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: volumeMounts: %v", ErrInvalid, err)
		}
		binds = append(binds, runtime.Bind{Source: o.cfg.Volumes.DataDir(vol.ID), Target: p})
		ids, paths = append(ids, vol.ID), append(paths, p)
	}
	return binds, ids, nil
}

// CreateVolume makes a team's volume.
func (o *Orchestrator) CreateVolume(ctx context.Context, teamID, name string) (*snapshot.Volume, error) {
	if o.cfg.Volumes == nil {
		return nil, fmt.Errorf("%w: this server keeps no volumes", ErrInvalid)
	}
	vol, err := o.cfg.Volumes.Create(teamID, name)
	switch {
	case errors.Is(err, snapshot.ErrVolumeName):
		return nil, fmt.Errorf("%w: name: %v", ErrInvalid, err)
	case errors.Is(err, snapshot.ErrVolumeExists):
		return nil, fmt.Errorf("%w: %v", ErrConflict, err)
	case err != nil:
		return nil, err
	}
	o.logger(ctx).Info("volume created", telemetry.KeyVolumeID, vol.ID, telemetry.KeyVolumeName, vol.Name)
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

// DeleteVolume deletes a team's volume and its files; ErrConflict while a live sandbox of
// this server mounts it.
func (o *Orchestrator) DeleteVolume(ctx context.Context, teamID, id string) error {
	vol, err := o.Volume(ctx, teamID, id)
	if err != nil {
		return err
	}
	for _, e := range o.entries() {
		e.mu.Lock()
		using := !e.killed && slices.Contains(e.volumes, vol.ID)
		sid := e.sb.ID
		e.mu.Unlock()
		if using {
			return fmt.Errorf("%w: volume %s is mounted in sandbox %s: kill it first", ErrConflict, vol.Name, sid)
		}
	}
	if err := o.cfg.Volumes.Delete(teamID, vol.ID); err != nil {
		return err
	}
	o.logger(ctx).Info("volume deleted", telemetry.KeyVolumeID, vol.ID, telemetry.KeyVolumeName, vol.Name)
	return nil
}
