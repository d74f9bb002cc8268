package orchestrator

import (
	"context"
	"fmt"
	"sort"

	"github.com/cove-dev/cove/internal/control/snapshot"
	"github.com/cove-dev/cove/internal/observe/telemetry"
	cove "github.com/cove-dev/cove/sdk"
)

// DiskUsage is each team's snapshot disk: its sandboxes paused as snapshots (their
// checkpoints, which go with the sandbox) and its snapshots (which go with DeleteSnapshot),
// teams with neither left out, ordered by team id. The bytes are measured now, on disk.
func (o *Orchestrator) DiskUsage(ctx context.Context) ([]cove.DiskUsage, error) {
	return o.diskUsage(true)
}

// diskUsage is DiskUsage; without wait, a sandbox in the middle of a transition (a pause
// writing its snapshot, for seconds) is left out rather than waited for: a /metrics scrape
// must not hang on one.
func (o *Orchestrator) diskUsage(wait bool) ([]cove.DiskUsage, error) {
	by := map[string]*cove.DiskUsage{}
	team := func(id string) *cove.DiskUsage {
		if by[id] == nil {
			by[id] = &cove.DiskUsage{TeamID: id}
		}
		return by[id]
	}
	if ck, err := o.checkpointer(); err == nil {
		for _, e := range o.entries() {
			if !wait && !e.mu.TryLock() {
				continue
			} else if wait {
				e.mu.Lock()
			}
			paused, teamID, id := e.onDisk && !e.killed, e.sb.TeamID, e.sb.ID
			e.mu.Unlock()
			if paused {
				u := team(teamID)
				u.PausedSandboxes++
				u.PausedBytes += ck.CheckpointBytes(id)
			}
		}
	}
	if o.cfg.Snapshots != nil {
		all, err := o.cfg.Snapshots.List(snapshot.Filter{})
		if err != nil {
			return nil, fmt.Errorf("disk usage: %w", err)
		}
		for _, sn := range all {
			u := team(sn.TeamID)
			u.Snapshots++
			u.SnapshotBytes += sn.Bytes
		}
	}
	out := make([]cove.DiskUsage, 0, len(by))
	for _, u := range by {
		out = append(out, *u)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].TeamID < out[j].TeamID })
	return out, nil
}

// watchDisk puts DiskUsage on /metrics (cove_snapshot_disk_bytes, by team and kind).
func (o *Orchestrator) watchDisk() {
	telemetry.WatchSnapshotDisk(func(emit func(team, kind string, bytes int64)) {
		usage, err := o.diskUsage(false)
		if err != nil {
			return
		}
		for _, u := range usage {
			emit(u.TeamID, telemetry.SnapshotDiskPaused, u.PausedBytes)
			emit(u.TeamID, telemetry.SnapshotDiskSnapshot, u.SnapshotBytes)
		}
	})
}
