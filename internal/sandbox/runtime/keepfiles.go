package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// FilesKeeper is a Runtime that can stop a sandbox and keep only its files (E2B's
// filesystem-only pause): its processes are killed and its memory dropped, its overlay's
// upper layer (and its disk, with a disk limit) stays, and a Create with Spec.Reboot
// starts it again, cold, on those files.
type FilesKeeper interface {
	// StopKeepFiles kills sandbox id's processes and lets go of its root, cgroups and own
	// network namespace, keeping its files for Spec.Reboot. A namespace it joined
	// (Spec.Netns) is the caller's and stays. Wait then reports the init's exit with
	// Exit.Checkpointed set: the sandbox lives on disk.
	StopKeepFiles(ctx context.Context, id string) (KeptFiles, error)
	// KeptFiles reports the files StopKeepFiles kept for sandbox id; ErrNoKeptFiles when
	// there are none (or the sandbox runs).
	KeptFiles(id string) (KeptFiles, error)
}

// KeptFiles is what a filesystem-only stop kept.
type KeptFiles struct {
	// Bytes is what the sandbox wrote (its overlay's upper layer) on disk.
	Bytes    int64
	Duration time.Duration
}

// ErrNoKeptFiles: the sandbox has no files kept by StopKeepFiles to reboot on.
var ErrNoKeptFiles = errors.New("no kept files")

var _ FilesKeeper = (*Runc)(nil)

// keptMarker, in a sandbox's directory, says its files were kept by StopKeepFiles: a
// directory without it is a half-made or half-destroyed sandbox, not one to reboot.
const keptMarker = "kept"

// StopKeepFiles implements FilesKeeper.
func (r *Runc) StopKeepFiles(ctx context.Context, id string) (KeptFiles, error) {
	begun := time.Now()
	if err := ValidID(id); err != nil {
		return KeptFiles{}, err
	}
	unlock := r.lock(id)
	defer unlock()
	sb := r.get(id)
	if sb == nil {
		return KeptFiles{}, fmt.Errorf("stop %s: %w", id, ErrNotFound)
	}
	dir := r.dir(id)
	bytes := diskBytes(r.UpperDir(id)) // read while the disk under it is mounted
	sb.checkpointing.Store(true)
	if _, err := r.runc(ctx, r.engineOf(id), "kill", "--all", id, "KILL"); err != nil && !errors.Is(err, ErrNotFound) && !notRunning(err) {
		sb.checkpointing.Store(false)
		return KeptFiles{}, fmt.Errorf("stop %s: %w", id, err)
	}
	select {
	case <-sb.exited:
	case <-time.After(10 * time.Second):
		return KeptFiles{}, fmt.Errorf("stop %s: init %d still runs after its kill", id, sb.pid)
	}
	// From here the processes are gone: a failure leaves a sandbox to destroy, not to run.
	releaseStdio(dir)
	var errs []error
	if _, err := r.runc(ctx, r.engineOf(id), "delete", "--force", id); err != nil && !errors.Is(err, ErrNotFound) {
		errs = append(errs, err)
	}
	// sb stays, exited, so Wait reports the stop; the reboot replaces it.
	if err := removeNetns(r.netnsPath(id)); err != nil {
		errs = append(errs, err)
	}
	if err := unmount(filepath.Join(dir, "rootfs")); err != nil {
		errs = append(errs, err)
	}
	// The overlay's work dir and mount point are made anew by the reboot's mount.
	layers := dir
	if exists(filepath.Join(dir, diskDir, "upper")) {
		layers = filepath.Join(dir, diskDir)
	}
	for _, d := range []string{filepath.Join(layers, "work"), filepath.Join(dir, "rootfs")} {
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, err)
		}
	}
	if layers != dir {
		if err := unmount(layers); err != nil {
			errs = append(errs, err)
		} else if err := os.Remove(layers); err != nil {
			errs = append(errs, err)
		}
	}
	if err := removeCgroups(r.cgroupPath(id)); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return KeptFiles{}, fmt.Errorf("stop %s: %w", id, err)
	}
	if err := os.WriteFile(filepath.Join(dir, keptMarker), nil, 0o600); err != nil {
		return KeptFiles{}, fmt.Errorf("stop %s: %w", id, err)
	}
	return KeptFiles{Bytes: bytes, Duration: time.Since(begun)}, nil
}

// KeptFiles implements FilesKeeper.
func (r *Runc) KeptFiles(id string) (KeptFiles, error) {
	if err := ValidID(id); err != nil {
		return KeptFiles{}, err
	}
	dir := r.dir(id)
	if !exists(filepath.Join(dir, keptMarker)) || r.runs(id) {
		return KeptFiles{}, fmt.Errorf("sandbox %s: %w", id, ErrNoKeptFiles)
	}
	if exists(filepath.Join(dir, "disk.img")) {
		return KeptFiles{Bytes: diskBytes(filepath.Join(dir, "disk.img"))}, nil
	}
	return KeptFiles{Bytes: diskBytes(filepath.Join(dir, "upper"))}, nil
}

// runs reports whether sandbox id has an init that has not exited.
func (r *Runc) runs(id string) bool {
	sb := r.get(id)
	if sb == nil {
		return false
	}
	select {
	case <-sb.exited:
		return false
	default:
		return true
	}
}

// reuseKept makes a Spec.Reboot create start from sandbox id's kept files and bundle: its
// directory is there, and with a disk limit its disk is mounted again. It returns where the
// overlay's upper and work dirs go, and the network namespace the sandbox joined ("" for
// its own, made anew).
func (r *Runc) reuseKept(id string, diskBytes int64) (layers, joined string, err error) {
	dir := r.dir(id)
	if !exists(filepath.Join(dir, keptMarker)) {
		return "", "", fmt.Errorf("reboot %s: %w", id, ErrNoKeptFiles)
	}
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return "", "", fmt.Errorf("reboot %s: %w", id, err)
	}
	var cfg specs.Spec
	if err := json.Unmarshal(b, &cfg); err != nil {
		return "", "", fmt.Errorf("reboot %s: config.json: %w", id, err)
	}
	if cfg.Linux != nil {
		for _, ns := range cfg.Linux.Namespaces {
			if ns.Type == specs.NetworkNamespace && ns.Path != "" && ns.Path != r.netnsPath(id) {
				joined = ns.Path
			}
		}
	}
	if err := os.Remove(filepath.Join(dir, keptMarker)); err != nil {
		return "", "", fmt.Errorf("reboot %s: %w", id, err)
	}
	img := filepath.Join(dir, "disk.img")
	if diskBytes <= 0 || !exists(img) {
		return dir, joined, nil
	}
	mnt := filepath.Join(dir, diskDir)
	if err := os.Mkdir(mnt, 0o755); err != nil {
		return "", "", fmt.Errorf("reboot %s: %w", id, err)
	}
	dev, err := attachLoop(img)
	if err != nil {
		return "", "", fmt.Errorf("reboot %s: %w", id, err)
	}
	defer dev.Close()
	if err := mountFS(dev.Name(), mnt); err != nil {
		return "", "", fmt.Errorf("reboot %s: mount %s on %s: %w", id, dev.Name(), mnt, err)
	}
	return mnt, joined, nil
}
