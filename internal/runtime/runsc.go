package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// The runsc engine: gVisor's runsc drives a sandbox through the same OCI bundle as runc
// (bundle.go), with these differences, all behind the same methods:
//
//   - Its global flags (runscFlags): the systrap platform (KVM hangs on this machine class),
//     the host's network stack inside the sandbox's own namespace (--network=host: the
//     sandbox process joins the spec's network namespace, so Dial, the veth, nftables, DNS
//     and the egress proxy work unchanged), no overlay of its own on the root (Cove's
//     overlay already takes the writes, on the sandbox's disk), and the spec's cgroups.
//   - The pid Cove waits for is the sandbox process (runsc boot, the sentry): it exits with
//     the init's status. The sandbox's own processes are no host processes.
//   - Checkpoint and restore are runsc's own (checkpoint.go), not CRIU's.
//   - Freeze and Thaw are runsc pause and resume (the sentry stops its tasks itself).

// engineAnnotation names, in a sandbox's config.json, the engine that runs it, so that a
// restarted server (Adopt), a destroy after a crash and a reboot on kept files find it.
const engineAnnotation = "dev.cove.engine"

// runscFlags are runsc's global flags after --root.
var runscFlags = []string{
	"--platform=systrap",
	"--network=host",
	"--overlay2=none",
	"--ignore-cgroups=false",
}

// findRunsc returns the runsc binary: path when given, else runsc beside the running
// executable, else runsc in PATH. It runs `runsc --version` to check it works.
func findRunsc(ctx context.Context, path string) (string, error) {
	if path == "" {
		if exe, err := os.Executable(); err == nil {
			if p := filepath.Join(filepath.Dir(exe), "runsc"); exists(p) {
				path = p
			}
		}
	}
	if path == "" {
		path = "runsc"
	}
	p, err := exec.LookPath(path)
	if err != nil {
		return "", fmt.Errorf("%w: no runsc binary (%s; COVE_RUNSC=1 scripts/deps.sh builds bin/runsc)", ErrUnsupported, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, p, "--version").CombinedOutput(); err != nil {
		return "", fmt.Errorf("%w: %s --version: %w: %s", ErrUnsupported, p, err, strings.TrimSpace(string(out)))
	}
	return p, nil
}

// Engines reports the engines this host offers: runc always, runsc when its binary is there.
func (r *Runc) Engines() []Engine {
	if r.runscErr != nil {
		return []Engine{EngineRunc}
	}
	return []Engine{EngineRunc, EngineRunsc}
}

// EngineErr says why engine cannot run sandboxes here, or nil when it can.
func (r *Runc) EngineErr(engine Engine) error {
	switch engine {
	case EngineRunc, "":
		return nil
	case EngineRunsc:
		if r.runscErr != nil {
			return fmt.Errorf("runtime engine runsc: %w", r.runscErr)
		}
		return nil
	}
	_, err := ParseEngine(string(engine))
	return err
}

// cli returns engine's binary and global flags.
func (r *Runc) cli(engine Engine) (string, []string, error) {
	if engine == EngineRunsc {
		if err := r.EngineErr(engine); err != nil {
			return "", nil, err
		}
		return r.cfg.RunscPath, append([]string{"--root", r.cfg.RunscRoot}, runscFlags...), nil
	}
	return r.cfg.RuncPath, []string{"--root", r.cfg.RuncRoot}, nil
}

// engineOf is the engine of sandbox id: the one it runs on, else the one its config.json
// names, else runc (a bundle written before there were engines).
func (r *Runc) engineOf(id string) Engine {
	if sb := r.get(id); sb != nil {
		return sb.engine
	}
	return bundleEngine(r.dir(id))
}

// bundleEngine reads the engine annotation of the config.json in dir.
func bundleEngine(dir string) Engine {
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return EngineRunc
	}
	var cfg struct {
		Annotations map[string]string `json:"annotations"`
	}
	if json.Unmarshal(b, &cfg) != nil {
		return EngineRunc
	}
	if e, err := ParseEngine(cfg.Annotations[engineAnnotation]); err == nil {
		return e
	}
	return EngineRunc
}

// Engine reports the engine sandbox id runs on.
func (r *Runc) Engine(id string) Engine { return r.engineOf(id) }

// runscCheckpointFile is the file a runsc checkpoint's state goes to in its image dir.
const runscCheckpointFile = "checkpoint.img"

// checkpointRunsc is Checkpoint for a runsc sandbox: `runsc checkpoint` stops its tasks,
// writes the sentry's whole state (tasks, memory, open files) to the image dir and ends
// the sandbox; the container left stopped is deleted, so Restore can create it again.
func (r *Runc) checkpointRunsc(ctx context.Context, sb *sandbox, begun time.Time) (CheckpointInfo, error) {
	id := sb.id
	img := r.checkpointDir(id)
	if err := os.RemoveAll(img); err != nil {
		return CheckpointInfo{}, fmt.Errorf("checkpoint %s: %w", id, err)
	}
	if err := os.Mkdir(img, 0o700); err != nil {
		return CheckpointInfo{}, fmt.Errorf("checkpoint %s: %w", id, err)
	}
	sb.checkpointing.Store(true)
	if _, err := r.runc(ctx, EngineRunsc, "checkpoint", "--image-path", img, id); err != nil {
		sb.checkpointing.Store(false)
		if strings.Contains(err.Error(), "no space left on device") || nearlyFull(img) {
			err = fmt.Errorf("%w: %w", ErrNoSpace, err)
		}
		_ = os.RemoveAll(img)
		return CheckpointInfo{}, fmt.Errorf("checkpoint %s: %w", id, err)
	}
	select {
	case <-sb.exited:
	case <-time.After(10 * time.Second):
		return CheckpointInfo{}, fmt.Errorf("checkpoint %s: sandbox process %d still runs after its checkpoint", id, sb.pid)
	}
	if _, err := r.runc(ctx, EngineRunsc, "delete", "--force", id); err != nil && !errors.Is(err, ErrNotFound) {
		return CheckpointInfo{}, fmt.Errorf("checkpoint %s: %w", id, err)
	}
	return CheckpointInfo{Bytes: diskBytes(img), Duration: time.Since(begun)}, nil
}
