package build

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cove-dev/cove/internal/builder/template"
)

// A template with a start command is started once at the end of its build, in a build
// sandbox; once its ready check passes, a memory snapshot of that sandbox (its processes,
// memory and the files they wrote) is kept in the template's directory, <name>/start-snapshot/,
// and sandboxes of the template are restored from it: the start command is already running,
// nothing waits for the ready check at create. The snapshot is published with the template
// (one rename), tied to the build that took it, and deleted with it.
//
// Where checkpoints are unavailable (no CRIU, a runtime without them, a build on the host
// without a server) the template has no snapshot: sandboxes run the start command at create
// and wait for the ready check, and the build log says so.

// SetStartSnapshotter makes builds of templates with a start command take a start snapshot
// with s. Without one (a build on the host) they take none. Call it before builds start.
func (s *Builder) SetStartSnapshotter(ss template.StartSnapshotter) { s.starter = ss }

// startSnapshot takes t's start snapshot into the build directory when t has a start
// command or a ready check; t.StartSnapshot records it. A ready check that never passes
// fails the build, as it would fail every create.
//
// A rebuild whose snapshot would start from the same state (same layers, start command,
// ready check, environment, user, workdir and size) reuses the snapshot of the template it
// replaces, linked (its files are only read), unless force (skipCache) is set.
func (s *Builder) startSnapshot(ctx context.Context, build string, t *template.Template, force bool, out *lineWriter) error {
	if t.StartCmd == "" && t.ReadyCmd == "" {
		return nil
	}
	out.startStep("finalize")
	key := startSnapshotKey(t)
	dir := filepath.Join(build, template.StartSnapshotDir)
	if cur, err := s.Get(t.Name); err == nil && !force && cur.StartSnapshot != nil && cur.StartSnapshot.Key == key {
		err := linkTree(cur.StartSnapshot.Dir, dir)
		if err == nil {
			snap := *cur.StartSnapshot
			snap.Dir = dir
			t.StartSnapshot = &snap
			out.Printf("==> start snapshot: cached, taken by build %s (%.1f MiB, ready check passed in %d ms)", snap.BuildID, float64(snap.Bytes)/(1<<20), snap.ReadyMS)
			return nil
		}
		_ = os.RemoveAll(dir)
		out.Printf("==> start snapshot: the cached one could not be reused (%v): taking a new one", err)
	}
	const fallback = "each sandbox of the template runs the start command and waits for its ready check at create"
	if s.starter == nil {
		out.Printf("==> start snapshot: none (built without a server to run the start command): %s", fallback)
		return nil
	}
	hold, err := s.HoldLayers() // the build's new layers are in no template yet
	if err != nil {
		return err
	}
	defer hold()
	rt := *t
	if err := s.Resolve(&rt); err != nil {
		return err
	}
	if rt.Root == "" {
		rt.Rootfs = filepath.Join(build, "rootfs")
	}
	out.Printf("==> start command: %q, ready check: %q (once, in a build sandbox)", t.StartCmd, t.ReadyCmd)
	snap, err := s.starter.SnapshotStart(ctx, &rt, dir, func(line string) { out.Printf("%s", line) })
	if errors.Is(err, template.ErrNoStartSnapshot) {
		out.Printf("==> start snapshot: unavailable (%s): %s", strings.TrimPrefix(err.Error(), template.ErrNoStartSnapshot.Error()+": "), fallback)
		return nil
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		return fmt.Errorf("start command: %w", err)
	}
	snap.BuildID, snap.Key = t.BuildID, key
	t.StartSnapshot = snap
	out.Printf("==> start snapshot: %.1f MiB, ready check passed in %d ms, checkpoint in %d ms: sandboxes start from it",
		float64(snap.Bytes)/(1<<20), snap.ReadyMS, snap.SnapshotMS)
	return nil
}

// startSnapshotKey hashes what a start snapshot of t starts from: its root and layers (each
// layer's key covers its steps and everything below), its start command and ready check,
// and the environment, user, workdir and size its sandboxes get.
func startSnapshotKey(t *template.Template) string {
	h := sha256.New()
	fmt.Fprintf(h, "root %q\nstart %q\nready %q\nuser %q\nworkdir %q\ncpu %d\nmemory %d\n", t.Root, t.StartCmd, t.ReadyCmd, t.User, t.Workdir, t.CPUCount, t.MemoryMB)
	for _, l := range t.Layers {
		fmt.Fprintf(h, "layer %s\n", l)
	}
	for _, k := range slices.Sorted(maps.Keys(t.Env)) {
		fmt.Fprintf(h, "env %q=%q\n", k, t.Env[k])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// linkTree makes dst a copy of the directory src whose files are hard links to src's.
func linkTree(src, dst string) error {
	if out, err := exec.Command("cp", "-al", "--", src, dst).CombinedOutput(); err != nil {
		return fmt.Errorf("cp -al %s %s: %w: %s", src, dst, err, strings.TrimSpace(string(out)))
	}
	return nil
}
