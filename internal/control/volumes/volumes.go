// Package volumes is the teams' volumes as the REST edge and the cluster ask for them:
// create, get, list, delete, their files and usage, and the hand-off of one to another node.
// The volume store (internal/control/snapshot) keeps their data and leases; the sandboxes that
// mount them are the orchestrator's, which this package knows only through Sandboxes, handed
// at construction. Binding a volume into a sandbox at its launch and letting go of it at its
// end stay in the orchestrator, on the same store.
package volumes

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cove-dev/cove/internal/control/snapshot"
	"github.com/cove-dev/cove/internal/errdefs"
	"github.com/cove-dev/cove/internal/observe/events"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	cove "github.com/cove-dev/cove/sdk"
)

// The sentinels a caller branches on (their kinds map to HTTP statuses).
var (
	ErrNotFound = errdefs.New(errdefs.ErrNotFound, "volume not found")
	ErrConflict = errdefs.New(errdefs.ErrConflict, "conflict")
	ErrInvalid  = errdefs.New(errdefs.ErrInvalidArgument, "invalid request")
)

// Sandboxes is what the volumes need of the running sandboxes (the orchestrator): whether
// one still holds the volumes it mounts. A lease of a sandbox that does not is stale, so a
// volume only it names is free to delete or hand off; one that does is named in the 409.
type Sandboxes interface {
	// HoldsVolumes reports whether sandbox id, in creation or live and not killed, still
	// holds the volumes it mounts.
	HoldsVolumes(sandboxID string) bool
}

// Quota is a team's volume limits: how many volumes and MiB in all (0: no limit).
type Quota struct{ Volumes, MB int }

// Config is what a Service is built of.
type Config struct {
	// Store keeps the volumes' data and leases; nil: the server keeps no volumes.
	Store *snapshot.Volumes
	// Sandboxes says which sandboxes hold their mounts.
	Sandboxes Sandboxes
	// SizeMB is a new volume's size when its create does not say; 0 makes plain
	// directories without a quota.
	SizeMB int
	// FreeFloorMB is the free space the volumes' disk keeps (0: 1024; negative: none).
	FreeFloorMB int
	// Quota is a team's volume limits; nil: none.
	Quota func(teamID string) Quota
	// Limits tells a team that a limit refused its volume (team.limit.reached); nil tells nobody.
	Limits *events.Limits
}

// Service serves the teams' volumes.
type Service struct{ cfg Config }

// New returns the service of cfg's volumes.
func New(cfg Config) *Service { return &Service{cfg: cfg} }

// Mount is a volume a sandbox mounts, named by the volume's name (E2B's volumeMounts).
type Mount struct {
	Name, Path string
	ReadOnly   bool
}

// CreateVolume makes a team's volume of sizeMB MiB (0: the server's default size; a server
// whose default is 0 makes plain directories without a quota).
func (s *Service) CreateVolume(ctx context.Context, teamID, name string, sizeMB int) (*snapshot.Volume, error) {
	if s.cfg.Store == nil {
		return nil, fmt.Errorf("%w: this server keeps no volumes", ErrInvalid)
	}
	if sizeMB == 0 {
		sizeMB = s.cfg.SizeMB
	}
	var q Quota
	if s.cfg.Quota != nil {
		q = s.cfg.Quota(teamID)
	}
	floor := s.cfg.FreeFloorMB
	if floor == 0 {
		floor = 1024
	}
	lim := snapshot.VolumeLimits{Count: q.Volumes, Bytes: int64(q.MB) << 20, FreeFloor: int64(max(0, floor)) << 20}
	vol, err := s.cfg.Store.Create(teamID, name, int64(sizeMB)<<20, lim)
	log := telemetry.Logger(ctx)
	switch {
	case errors.Is(err, snapshot.ErrVolumeQuota):
		log.Warn("volume refused: team quota", telemetry.KeyVolumeName, name, telemetry.KeyError, err.Error())
		s.cfg.Limits.Reached(ctx, teamID, "", "", cove.LimitTeamVolumes, err.Error())
		return nil, fmt.Errorf("%w: %v", errdefs.ErrResourceExhausted, err)
	case errors.Is(err, snapshot.ErrVolumeNoSpace):
		log.Warn("volume refused: host disk", telemetry.KeyVolumeName, name, telemetry.KeyError, err.Error())
		s.cfg.Limits.Reached(ctx, teamID, "", "", cove.LimitHostVolumes, err.Error())
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
	log.Info("volume created", telemetry.KeyVolumeID, vol.ID, telemetry.KeyVolumeName, vol.Name, telemetry.KeyVolumeSizeBytes, vol.SizeBytes)
	return vol, nil
}

// Volume returns a team's volume by id or name.
func (s *Service) Volume(ctx context.Context, teamID, id string) (*snapshot.Volume, error) {
	if s.cfg.Store == nil {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	vol, err := s.cfg.Store.Get(teamID, id)
	if err != nil {
		return nil, errdefs.Mark(err, ErrNotFound)
	}
	return vol, nil
}

// ListVolumes lists a team's volumes.
func (s *Service) ListVolumes(ctx context.Context, teamID string) ([]*snapshot.Volume, error) {
	if s.cfg.Store == nil {
		return nil, nil
	}
	return s.cfg.Store.List(teamID)
}

// VolumeByID returns a volume by id, of whichever team: the content API authenticates by
// the volume's own token.
func (s *Service) VolumeByID(ctx context.Context, id string) (*snapshot.Volume, error) {
	if s.cfg.Store == nil {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	vol, err := s.cfg.Store.ByID(id)
	if err != nil {
		return nil, errdefs.Mark(err, ErrNotFound)
	}
	return vol, nil
}

// VolumeFiles opens a volume's content; close it after use.
func (s *Service) VolumeFiles(ctx context.Context, vol *snapshot.Volume) (*snapshot.Files, error) {
	return s.cfg.Store.Files(vol)
}

// VolumeUsage returns the bytes a volume's files take (0 for a volume without a size).
func (s *Service) VolumeUsage(ctx context.Context, vol *snapshot.Volume) (int64, error) {
	return s.cfg.Store.Usage(vol)
}

// VolumeMountsOf returns the volumes a team's sandbox mounts as its leases say (an adopted
// sandbox's too): E2B's volumeMounts of its info.
func (s *Service) VolumeMountsOf(ctx context.Context, teamID, sandboxID string) ([]Mount, error) {
	if s.cfg.Store == nil {
		return nil, nil
	}
	mounts, err := s.cfg.Store.MountsOf(teamID, sandboxID)
	if err != nil {
		return nil, err
	}
	out := make([]Mount, 0, len(mounts))
	for _, m := range mounts {
		out = append(out, Mount{Name: m.Volume.Name, Path: m.Path, ReadOnly: m.ReadOnly})
	}
	return out, nil
}

// DeleteVolume deletes a team's volume and its files; ErrConflict, naming the sandbox, while
// a live sandbox mounts it (one adopted after a restart included: mounts are leases on disk).
func (s *Service) DeleteVolume(ctx context.Context, teamID, id string) error {
	vol, err := s.Volume(ctx, teamID, id)
	if err != nil {
		return err
	}
	err = s.cfg.Store.Delete(teamID, vol.ID, s.cfg.Sandboxes.HoldsVolumes)
	switch {
	case errors.Is(err, snapshot.ErrVolumeInUse):
		return fmt.Errorf("%w: %v", ErrConflict, err)
	case err != nil:
		return err
	}
	telemetry.Logger(ctx).Info("volume deleted", telemetry.KeyVolumeID, vol.ID, telemetry.KeyVolumeName, vol.Name)
	return nil
}

// ReleaseVolume publishes volume id to the object store and lets go of it, for another node
// that mounts it next (the cluster's POST /cluster/volumes/{id}/release): ErrConflict,
// naming the sandbox, while a sandbox here mounts it.
func (s *Service) ReleaseVolume(ctx context.Context, id string) error {
	if s.cfg.Store == nil {
		return fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	begun := time.Now()
	if err := s.cfg.Store.Release(ctx, id, s.cfg.Sandboxes.HoldsVolumes); errors.Is(err, snapshot.ErrVolumeInUse) {
		return fmt.Errorf("%w: %v", ErrConflict, err)
	} else if err != nil {
		return err
	}
	telemetry.Logger(ctx).Info("volume released to another node", telemetry.KeyVolumeID, id, telemetry.KeyDurationMS, time.Since(begun).Milliseconds())
	return nil
}
