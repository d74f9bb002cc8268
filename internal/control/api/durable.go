package api

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cove-dev/cove/internal/control/orchestrator"
	"github.com/cove-dev/cove/internal/control/snapshot"
	"github.com/cove-dev/cove/internal/control/volumes"
	"github.com/cove-dev/cove/internal/errdefs"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	cove "github.com/cove-dev/cove/sdk"
)

// Durable forks sandboxes and keeps snapshots (the orchestrator).
type Durable interface {
	Fork(ctx context.Context, teamID, id string, count int, timeout time.Duration) ([]orchestrator.ForkResult, error)
	CreateSnapshot(ctx context.Context, teamID, id, name string) (*snapshot.Snapshot, error)
	ListSnapshots(ctx context.Context, teamID, sandboxID, name string) ([]*snapshot.Snapshot, error)
	DeleteSnapshot(ctx context.Context, teamID, id string) error
	DiskUsage(ctx context.Context) ([]cove.DiskUsage, error)
}

// Volumes keeps the teams' volumes (internal/control/volumes).
type Volumes interface {
	CreateVolume(ctx context.Context, teamID, name string, sizeMB int) (*snapshot.Volume, error)
	Volume(ctx context.Context, teamID, id string) (*snapshot.Volume, error)
	ListVolumes(ctx context.Context, teamID string) ([]*snapshot.Volume, error)
	DeleteVolume(ctx context.Context, teamID, id string) error
	VolumeByID(ctx context.Context, id string) (*snapshot.Volume, error)
	VolumeFiles(ctx context.Context, vol *snapshot.Volume) (*snapshot.Files, error)
	VolumeUsage(ctx context.Context, vol *snapshot.Volume) (int64, error)
	VolumeMountsOf(ctx context.Context, teamID, sandboxID string) ([]volumes.Mount, error)
}

// volumeMountsOf is a sandbox's volumeMounts for its info; nil when the server keeps no
// volumes or the sandbox mounts none.
func (a *api) volumeMountsOf(ctx context.Context, teamID, sandboxID string) ([]cove.VolumeMount, error) {
	v := a.cfg.Volumes
	if v == nil {
		return nil, nil
	}
	mounts, err := v.VolumeMountsOf(ctx, teamID, sandboxID)
	if err != nil {
		return nil, fmt.Errorf("volume mounts of sandbox %s: %w", sandboxID, err)
	}
	var out []cove.VolumeMount
	for _, m := range mounts {
		out = append(out, cove.VolumeMount{Name: m.Name, Path: m.Path, ReadOnly: m.ReadOnly})
	}
	return out, nil
}

// volumeJSON is E2B's Volume; with the token it is VolumeAndToken. It is the SDK's type.
type volumeJSON = cove.Volume

// volumeOf renders vol, with its token when withToken, and its usage.
func volumeOf(ctx context.Context, v Volumes, vol *snapshot.Volume, withToken bool) (volumeJSON, error) {
	out := volumeJSON{ID: vol.ID, Name: vol.Name, SizeBytes: vol.SizeBytes}
	if withToken {
		out.Token = vol.Token
	}
	used, err := v.VolumeUsage(ctx, vol)
	if err != nil {
		return out, fmt.Errorf("volume %s: %w", vol.Name, err)
	}
	out.UsedBytes = used
	return out, nil
}

// routeVolumes registers the volume routes when the sandboxes keep volumes.
func (a *api) routeVolumes() {
	v := a.cfg.Volumes
	if v == nil {
		return
	}
	a.handle("POST /volumes", func(w http.ResponseWriter, r *http.Request, c caller) error {
		var body cove.NewVolume
		if err := decode(r, &body); err != nil {
			return err
		}
		if body.SizeMB < 0 || int64(body.SizeMB) > snapshot.MaxVolumeBytes>>20 {
			return fmt.Errorf("%w: sizeMB must be 1..%d MiB (0 or absent: the server's default), not %d", errBadRequest, snapshot.MaxVolumeBytes>>20, body.SizeMB)
		}
		vol, err := v.CreateVolume(r.Context(), c.team.ID, body.Name, body.SizeMB)
		if err != nil {
			return fmt.Errorf("create volume %q: %w", body.Name, err)
		}
		out, err := volumeOf(r.Context(), v, vol, true)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusCreated, out)
		return nil
	})
	a.handle("GET /volumes", func(w http.ResponseWriter, r *http.Request, c caller) error {
		all, err := v.ListVolumes(r.Context(), c.team.ID)
		if err != nil {
			return fmt.Errorf("list volumes: %w", err)
		}
		out := []volumeJSON{}
		for _, vol := range all {
			one, err := volumeOf(r.Context(), v, vol, false)
			if err != nil {
				return fmt.Errorf("list volumes: %w", err)
			}
			out = append(out, one)
		}
		writeJSON(w, http.StatusOK, out)
		return nil
	})
	a.handle("GET /volumes/{volumeID}", func(w http.ResponseWriter, r *http.Request, c caller) error {
		vol, err := v.Volume(r.Context(), c.team.ID, r.PathValue("volumeID"))
		if err != nil {
			return fmt.Errorf("get volume: %w", err)
		}
		out, err := volumeOf(r.Context(), v, vol, true)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, out)
		return nil
	})
	a.handle("DELETE /volumes/{volumeID}", func(w http.ResponseWriter, r *http.Request, c caller) error {
		if err := v.DeleteVolume(r.Context(), c.team.ID, r.PathValue("volumeID")); err != nil {
			return fmt.Errorf("delete volume: %w", err)
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	})
	a.routeVolumeContent(v)
}

// routeDurable registers the fork, snapshot and volume routes the server declared (Config.Durable, Config.Volumes).
func (a *api) routeDurable() {
	a.routeVolumes()
	d := a.cfg.Durable
	if d == nil {
		return
	}
	a.handle("POST /sandboxes/{id}/fork", func(w http.ResponseWriter, r *http.Request, c caller) error { return a.fork(w, r, c, d) })
	a.handle("POST /sandboxes/{id}/snapshots", func(w http.ResponseWriter, r *http.Request, c caller) error { return a.createSnapshot(w, r, c, d) })
	a.handle("GET /snapshots", func(w http.ResponseWriter, r *http.Request, c caller) error { return a.listSnapshots(w, r, c, d) })
	a.handle("DELETE /snapshots/{snapshotID}", func(w http.ResponseWriter, r *http.Request, c caller) error { return a.deleteSnapshot(w, r, c, d) })
	a.handleAdmin("GET /admin/disk", func(w http.ResponseWriter, r *http.Request) error {
		usage, err := d.DiskUsage(r.Context())
		if err != nil {
			return fmt.Errorf("snapshot disk usage: %w", err)
		}
		writeJSON(w, http.StatusOK, usage)
		return nil
	})
}

// unroutedDurable serves what no route claimed but is a snapshot's: the npm SDK's
// deleteSnapshot sends DELETE /templates/{snapshotID} (E2B keeps snapshots as templates).
// It is a fallback, not a route, so that a templates API may own DELETE /templates/{id};
// that handler should then pass snapshot ids (snapshot.IsID) here.
func (a *api) unroutedDurable(r *http.Request) http.HandlerFunc {
	id, isTemplate := strings.CutPrefix(r.URL.Path, "/templates/")
	if r.Method != http.MethodDelete || !isTemplate {
		return nil
	}
	del := a.snapshotDelete(id)
	if del == nil {
		return nil
	}
	return a.authenticated(del)
}

// snapshotDelete is the handler that deletes snapshot id, or nil when id is no snapshot's
// (or the server keeps none).
func (a *api) snapshotDelete(id string) handlerFunc {
	d := a.cfg.Durable
	if d == nil || !snapshot.IsID(id) {
		return nil
	}
	return func(w http.ResponseWriter, r *http.Request, c caller) error {
		if err := d.DeleteSnapshot(r.Context(), c.team.ID, id); err != nil {
			return fmt.Errorf("delete snapshot %s: %w", id, err)
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
}

// forkResult is E2B's SandboxForkResult: the sandbox, or the error that kept it from starting.
type forkResult struct {
	Sandbox *newSandboxJSON `json:"sandbox,omitempty"`
	Error   *cove.ErrorBody `json:"error,omitempty"`
}

func (a *api) fork(w http.ResponseWriter, r *http.Request, c caller, d Durable) error {
	id := r.PathValue("id")
	var body cove.SandboxForkRequest
	if err := decode(r, &body); err != nil {
		return err
	}
	timeout, err := seconds("timeout", body.Timeout)
	if err != nil {
		return err
	}
	count := 1
	if body.Count != nil {
		count = *body.Count
	}
	if count < 1 || count > orchestrator.MaxForks {
		return fmt.Errorf("%w: count must be between 1 and %d, not %d", errBadRequest, orchestrator.MaxForks, count)
	}
	results, err := d.Fork(r.Context(), c.team.ID, id, count, timeout)
	if err != nil {
		return fmt.Errorf("fork sandbox %s: %w", id, err)
	}
	rid := telemetry.RequestID(r.Context())
	out := make([]forkResult, len(results))
	for i, res := range results {
		if res.Err != nil {
			body := errdefs.NewBody(statusOf(res.Err), res.Err.Error(), rid)
			out[i].Error = &body
			continue
		}
		if err := a.inheritIAM(r.Context(), c, id, res.Sandbox); err != nil {
			body := errdefs.NewBody(statusOf(err), err.Error(), rid)
			out[i].Error = &body
			continue
		}
		sb := a.newSandbox(res.Sandbox)
		out[i].Sandbox = &sb
	}
	writeJSON(w, http.StatusCreated, out)
	return nil
}

// snapshotInfo is E2B's SnapshotInfo, with Cove's facts beside it: the SDK's type.
type snapshotInfo = cove.SnapshotInfo

func infoOf(sn *snapshot.Snapshot) snapshotInfo {
	names := []string{}
	if sn.Name != "" {
		names = append(names, sn.Name)
	}
	return snapshotInfo{ID: sn.ID, Names: names, SandboxID: sn.SandboxID, TemplateID: sn.TemplateID, CreatedAt: sn.CreatedAt, SizeBytes: sn.Bytes}
}

func (a *api) createSnapshot(w http.ResponseWriter, r *http.Request, c caller, d Durable) error {
	id := r.PathValue("id")
	var body cove.CreateSnapshotRequest
	if err := decode(r, &body); err != nil {
		return err
	}
	if len(body.Name) > 128 {
		return fmt.Errorf("%w: name is longer than 128 bytes", errBadRequest)
	}
	sn, err := d.CreateSnapshot(r.Context(), c.team.ID, id, body.Name)
	if err != nil {
		return fmt.Errorf("snapshot sandbox %s: %w", id, err)
	}
	writeJSON(w, http.StatusCreated, infoOf(sn))
	return nil
}

func (a *api) listSnapshots(w http.ResponseWriter, r *http.Request, c caller, d Durable) error {
	q := r.URL.Query()
	limit := 100
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 100 {
			return fmt.Errorf("%w: limit must be 1..100, not %q", errBadRequest, s)
		}
		limit = n
	}
	offset := 0
	if s := q.Get("nextToken"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return fmt.Errorf("%w: nextToken %q is not one this server gave", errBadRequest, s)
		}
		offset = n
	}
	all, err := d.ListSnapshots(r.Context(), c.team.ID, q.Get("sandboxID"), q.Get("name"))
	if err != nil {
		return fmt.Errorf("list snapshots: %w", err)
	}
	out := []snapshotInfo{}
	for i := offset; i < len(all) && len(out) < limit; i++ {
		out = append(out, infoOf(all[i]))
	}
	if next := offset + len(out); next < len(all) {
		w.Header().Set("X-Next-Token", strconv.Itoa(next))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (a *api) deleteSnapshot(w http.ResponseWriter, r *http.Request, c caller, d Durable) error {
	id := r.PathValue("snapshotID")
	if err := d.DeleteSnapshot(r.Context(), c.team.ID, id); err != nil {
		return fmt.Errorf("delete snapshot %s: %w", id, err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
