package template

import (
	"context"
	"errors"
	"time"
)

// StartSnapshotDir is the directory of a template's start snapshot, inside the template's.
const StartSnapshotDir = "start-snapshot"

// StartSnapshot is a template's start snapshot: a sandbox of the template checkpointed once
// its start command passed its ready check.
type StartSnapshot struct {
	BuildID string `json:"build_id,omitempty"` // the build that took it
	// Key names the state the snapshot starts from (startSnapshotKey): a rebuild with the
	// same key reuses the snapshot.
	Key   string `json:"key"`
	Bytes int64  `json:"bytes"` // on disk
	// ReadyMS is how long the start command took to pass its ready check; SnapshotMS how
	// long the checkpoint and its export took.
	ReadyMS    int64 `json:"ready_ms"`
	SnapshotMS int64 `json:"snapshot_ms"`
	// Network says the build sandbox had a network (its resolv.conf and CA bundle mounts):
	// a sandbox restored from the snapshot needs the same mounts, so a server without
	// sandbox networks (or with) starts the command instead.
	Network   bool      `json:"network"`
	CreatedAt time.Time `json:"created_at"`
	// Dir holds the snapshot's files (the runtime's export), for runtime.Spec.Restore.
	Dir string `json:"-"`
}

// taggedStartSnapshot points the start snapshot of t, tag of name, at the files of name's
// while name starts from the same state (the same snapshot key); a tag of a build that
// differs has none (its build's snapshot went with the template it replaced), and its
// sandboxes run the command.
func (s *Store) taggedStartSnapshot(name string, t *Template) {
	if t.StartSnapshot == nil {
		return
	}
	t.StartSnapshot.Dir = ""
	cur, err := s.readRecord(context.Background(), name, "")
	if err != nil {
		return
	}
	s.place(cur, name)
	if cur.StartSnapshot != nil && t.StartSnapshot.Key != "" && cur.StartSnapshot.Key == t.StartSnapshot.Key {
		t.StartSnapshot.Dir = cur.StartSnapshot.Dir
	}
}

// ErrNoStartSnapshot: checkpoints are not available here; sandboxes of the template start
// the command at create instead.
var ErrNoStartSnapshot = errors.New("start snapshots unavailable")

// StartSnapshotter takes start snapshots (the orchestrator, which runs sandboxes).
type StartSnapshotter interface {
	// SnapshotStart starts a sandbox of t (resolved: Rootfs and LayerDirs set), runs its
	// start command, waits for its ready check, then checkpoints the sandbox and exports the
	// checkpoint to dir (which must not exist) and destroys it. It fails with
	// ErrNoStartSnapshot before starting anything when checkpoints are unavailable. Progress
	// lines go to log.
	SnapshotStart(ctx context.Context, t *Template, dir string, log func(line string)) (*StartSnapshot, error)
}
